"""The Spark configuration the job forces, without importing pyspark.

Only settings that are safe on any cluster: no UI, few shuffle partitions, the driver bound
to ``driver_host``, and a quiet log. Spark's own log4j2 defaults print WARN lines while the
JVM starts (a loopback hostname, no native Hadoop library, "Setting default log level"),
before ``setLogLevel`` can run. A JVM this process starts therefore gets a log4j2
configuration at ``log_level`` from the start; one that already runs (spark-submit, a test's
session) gets ``setLogLevel``. The JVM's own "Using incubator modules" line cannot be turned
off from here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spark_partitions.config import SparkSettings

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


def session_conf(settings: SparkSettings, log_option: str | None = None) -> dict[str, str]:
    """The Spark configuration this package forces; ``log_option``: a JVM option (the log
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
