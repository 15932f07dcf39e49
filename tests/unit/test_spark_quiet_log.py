"""Spark's log is quiet from the JVM's start (issue 14, item 10): a JVM this process starts
is given a log4j2 configuration at the session's level (ERROR), so the start-up WARN lines
(loopback hostname, native Hadoop, "Setting default log level") are not printed, and a
configuration the caller names is kept. No JVM is started here."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from spark_partitions.config import SparkSettings
from spark_partitions.spark_conf import LOG4J_CONFIG_PROPERTY, log_config_option, session_conf


def test_the_jvm_gets_a_log4j2_configuration_at_the_session_level() -> None:
    with log_config_option(SparkSettings()) as option:
        assert option is not None and option.startswith(f"-D{LOG4J_CONFIG_PROPERTY}=file:")
        path = Path(urlparse(option.split("=", 1)[1]).path)
        text = path.read_text()
        assert "rootLogger.level = error" in text
        # the py4j gateway's logger at the same level: no "Setting default log level" line
        assert "logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer" in text
        assert "logger.gateway.level = error" in text
        conf = session_conf(SparkSettings(java_options="-XX:+UseSerialGC"), option)
        assert conf["spark.driver.extraJavaOptions"] == f"{option} -XX:+UseSerialGC"
    assert not path.exists()  # read by the JVM at its start: not left behind


def test_a_log4j_configuration_of_the_caller_is_kept() -> None:
    own = "-Dlog4j2.configurationFile=/etc/spark/log4j2.properties"
    with log_config_option(SparkSettings(java_options=own)) as option:
        assert option is None
        conf = session_conf(SparkSettings(java_options=own), option)
    assert conf["spark.driver.extraJavaOptions"] == own
    assert "spark.driver.extraJavaOptions" not in session_conf(SparkSettings())
