"""A SparkSession with safe defaults for this service (notes PART B1).

Nothing here picks a master: the CLI passes ``--master`` (``local[*]`` when run by hand);
under ``spark-submit`` it passes none and Spark's own configuration decides. Only settings
that are safe on any cluster are forced: no UI, few shuffle partitions, a quiet log, and the
driver bound to ``driver_host`` (127.0.0.1 by default, DESIGN §11; give an address the
executors can reach when the master is a real cluster).

A quiet log: Spark's own log4j2 defaults print WARN lines while the JVM starts (a loopback
hostname, no native Hadoop library, "Setting default log level"), before ``setLogLevel`` can
run. A JVM this process starts therefore gets a log4j2 configuration at ``log_level`` from
the start; one that already runs (spark-submit, a test's session) gets ``setLogLevel``.
The JVM's own "Using incubator modules" line cannot be turned off from here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spark_partitions.config import DEFAULT_SHUFFLE_PARTITIONS
from spark_partitions.errors import EngineUnavailable

INSTALL_HINT = "pyspark is not installed: install the spark extra: pip install -e '.[spark]'"
DEFAULT_DRIVER_HOST = "127.0.0.1"
DEFAULT_APP_NAME = "spark-partitions"
DEFAULT_LOG_LEVEL = "ERROR"
LOG4J_CONFIG_PROPERTY = "log4j2.configurationFile"
LOG4J_PROPERTIES = """\
# spark_partitions: Spark's console log at {level} from the JVM's start
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# The py4j gateway starts logging "as a shell": at this logger's level, else WARN, and says
# so on stderr ("Setting default log level") unless both levels are the same.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
"""


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """How to start Spark.

    ``master``: a master URL, or None to leave it to spark-submit / spark-defaults.conf.
    ``driver_host``: address the driver binds to and advertises.
    ``shuffle_partitions``: ``spark.sql.shuffle.partitions`` (Spark's 200 costs 5x here).
    ``driver_memory``: JVM heap of the driver (only applies when this process starts the
    JVM), None for Spark's default.
    ``java_options``: extra JVM options of the driver (same caveat); one that names a
    log4j configuration keeps it instead of the quiet one this module writes.
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
    with log_config_option(settings) as log_option:
        for key, value in session_conf(settings, log_option).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()  # a JVM it starts has read the file when it returns
    spark.sparkContext.setLogLevel(settings.log_level)
    return spark


@contextmanager
def log_config_option(settings: SparkSettings) -> Iterator[str | None]:
    """The JVM option naming a log4j2 configuration at ``settings.log_level``, written to
    a temporary file for as long as the session takes to start; None when
    ``settings.java_options`` names a log4j configuration of its own."""
    if settings.java_options and "log4j" in settings.java_options:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="spark-partitions-log-") as directory:
        path = Path(directory) / "log4j2.properties"
        path.write_text(LOG4J_PROPERTIES.format(level=settings.log_level.lower()))
        yield f"-D{LOG4J_CONFIG_PROPERTY}={path.as_uri()}"


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


def session_conf(settings: SparkSettings, log_option: str | None = None) -> dict[str, str]:
    """The Spark configuration this module forces; ``log_option``: a JVM option (the log
    configuration) put before ``settings.java_options``."""
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
    java_options = " ".join(filter(None, (log_option, settings.java_options)))
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
    return conf
