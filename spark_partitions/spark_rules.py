"""The rules of :mod:`spark_partitions.rules` as Spark column expressions.

``normalize`` turns the raw columns of :mod:`spark_partitions.spark_read` into the shape of
:class:`~spark_partitions.rules.Clean` plus ``reason`` (null for a valid row) and
``record`` (kept only for rejected rows, so valid rows stay small in memory).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_partitions.rules import (
    DEFAULT_PARTITION,
    MAX_ID_CHARS,
    MAX_PARTITION_CHARS,
    PUBLISHER_ID_JAVA,
    Kind,
    Reason,
)
from spark_partitions.spark_read import KIND_SUFFIX

_INFINITIES = (float("inf"), float("-inf"))


def normalize(raw: DataFrame, max_payload_bytes: int) -> DataFrame:
    """Columns id, publisher_id, partition_text, partition_is_int, timestamp, payload,
    reason, record."""
    reason = F.coalesce(F.col("pre_reason"), *_checks(max_payload_bytes))
    timestamp = F.col("timestamp")
    checked = raw.select(
        F.col("id"),
        F.col("publisher_id"),
        F.when(_is("partition", Kind.NULL), F.lit(str(DEFAULT_PARTITION)))
        .otherwise(F.col("partition"))
        .alias("partition_text"),
        _partition_is_int().alias("partition_is_int"),
        F.when(timestamp == 0, F.lit(0.0)).otherwise(timestamp).alias("timestamp"),
        F.col("payload"),
        reason.alias("reason"),
        F.col("record"),
    )
    # A projection of its own: the long reason expression is evaluated once per row.
    return checked.withColumn("record", F.when(F.col("reason").isNotNull(), F.col("record")))


def _partition_is_int() -> Column:
    default_is_int = type(DEFAULT_PARTITION) is int
    return _is("partition", Kind.INT) | (_is("partition", Kind.NULL) & F.lit(default_is_int))


def _kind(name: str) -> Column:
    return F.col(name + KIND_SUFFIX)


def _is(name: str, *kinds: Kind) -> Column:
    return _kind(name).isin(*(kind.value for kind in kinds))


def _when(condition: Column, reason: Reason) -> Column:
    return F.when(condition, F.lit(reason.value))


def _checks(max_payload_bytes: int) -> list[Column]:
    """In the order of rules.check: the first that fires is the reason."""
    ident, publisher = F.col("id"), F.col("publisher_id")
    partition, timestamp, payload = F.col("partition"), F.col("timestamp"), F.col("payload")
    return [
        _when(_is("id", Kind.NULL), Reason.ID_REQUIRED),
        _when(~_is("id", Kind.STRING) | (ident == ""), Reason.ID_TYPE),
        _when(F.length(ident) > MAX_ID_CHARS, Reason.ID_LENGTH),
        _when(_is("publisher_id", Kind.NULL), Reason.PUBLISHER_REQUIRED),
        _when(
            ~_is("publisher_id", Kind.STRING) | ~publisher.rlike(PUBLISHER_ID_JAVA),
            Reason.PUBLISHER_FORMAT,
        ),
        _when(~_is("partition", Kind.NULL, Kind.STRING, Kind.INT), Reason.PARTITION_TYPE),
        _when(
            _is("partition", Kind.STRING)
            & ((F.length(partition) == 0) | (F.length(partition) > MAX_PARTITION_CHARS)),
            Reason.PARTITION_LENGTH,
        ),
        _when(_is("timestamp", Kind.NULL), Reason.TIMESTAMP_REQUIRED),
        _when(~_is("timestamp", Kind.INT, Kind.NUMBER), Reason.TIMESTAMP_TYPE),
        _when(
            timestamp.isNull() | F.isnan(timestamp) | timestamp.isin(*_INFINITIES),
            Reason.TIMESTAMP_FINITE,
        ),
        _when(~_is("payload", Kind.NULL, Kind.STRING), Reason.PAYLOAD_TYPE),
        _when(F.octet_length(payload) > max_payload_bytes, Reason.PAYLOAD_SIZE),
    ]
