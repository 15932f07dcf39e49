"""A SparkSession with safe defaults for this service (notes PART B1).

Nothing here picks a master: the CLI passes ``--master`` (``local[*]`` when run by hand);
under ``spark-submit`` it passes none and Spark's own configuration decides. Only settings
that are safe on any cluster are forced: no UI, few shuffle partitions, a quiet log, and the
driver bound to ``driver_host`` (127.0.0.1 by default, DESIGN §11; give an address the
executors can reach when the master is a real cluster).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from spark_partitions.config import DEFAULT_SHUFFLE_PARTITIONS
from spark_partitions.errors import EngineUnavailable

INSTALL_HINT = "pyspark is not installed: install the spark extra: pip install -e '.[spark]'"
DEFAULT_DRIVER_HOST = "127.0.0.1"
DEFAULT_APP_NAME = "spark-partitions"
DEFAULT_LOG_LEVEL = "ERROR"


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """How to start Spark.

    ``master``: a master URL, or None to leave it to spark-submit / spark-defaults.conf.
    ``driver_host``: address the driver binds to and advertises.
    ``shuffle_partitions``: ``spark.sql.shuffle.partitions`` (Spark's 200 costs 5x here).
    ``driver_memory``: JVM heap of the driver (only applies when this process starts the
    JVM), None for Spark's default.
    ``java_options``: extra JVM options of the driver (same caveat).
    ``codegen``: Spark's whole-stage code generation. Off by default: the plan is a one-shot
    job in a fresh JVM, and compiling the generated code cost more than it saved here
    (1M JSON lines: 36-42 s off against 41-50 s on, docs/spark.md).
    """

    master: str | None = None
    driver_host: str = DEFAULT_DRIVER_HOST
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS
    driver_memory: str | None = None
    java_options: str | None = None
    codegen: bool = False
    app_name: str = DEFAULT_APP_NAME
    log_level: str = DEFAULT_LOG_LEVEL


def require_pyspark() -> None:
    """Raise EngineUnavailable with the install hint when pyspark cannot be imported."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise EngineUnavailable(INSTALL_HINT) from None


def build_session(settings: SparkSettings):
    """Start (or join) the SparkSession; returns it with the log level already set."""
    require_pyspark()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(settings.app_name)
    if settings.master:
        builder = builder.master(settings.master)
    for key, value in session_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level)
    return spark


@contextmanager
def spark_session(settings: SparkSettings) -> Iterator:
    """A session for one run; stopped afterwards only if this call started it."""
    require_pyspark()
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    spark = build_session(settings)
    try:
        yield spark
    finally:
        if existing is None:
            spark.stop()


def session_conf(settings: SparkSettings) -> dict[str, str]:
    """The Spark configuration this module forces."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": settings.driver_host,
        "spark.driver.bindAddress": settings.driver_host,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.codegen.wholeStage": str(settings.codegen).lower(),
    }
    if settings.driver_memory:
        conf["spark.driver.memory"] = settings.driver_memory
    if settings.java_options:
        conf["spark.driver.extraJavaOptions"] = settings.java_options
    return conf
