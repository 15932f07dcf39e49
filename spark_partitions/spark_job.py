"""The Spark engine (DESIGN §10): DataFrame API only, no Python UDFs, no events on the driver.

:func:`spark_session` starts the session with safe defaults (notes PART B1). Nothing here
picks a master: the CLI passes ``--master`` (``local[*]`` when run by hand); under
``spark-submit`` it passes none and Spark's own configuration decides. Only settings that
are safe on any cluster are forced: no UI, few shuffle partitions, a quiet log, and the
driver bound to ``driver_host`` (:class:`~spark_partitions.config.SparkSettings`).

:func:`run_spark` plans with a session. Steps: read and validate (:mod:`spark_read`,
:mod:`spark_rules`), write every rejected row to ``rejects/`` (JSON lines with ``reason``
and ``record``), keep one row per dedupe key (``PlanConfig.dedupe_key``; window ordered as
:func:`spark_partitions.reference.dedupe_rank`), aggregate the groups and bring only those
aggregates to the driver, plan there in plain Python (:mod:`plan`), then write the events
to ``blocks/`` sorted by ``(block, timestamp, id)`` and ``plan.json`` last. Paths are used
as given, so any filesystem Spark can reach works.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F

from spark_partitions.config import Outcome, PlanConfig, SparkSettings
from spark_partitions.formats import Format
from spark_partitions.output import BLOCK_COLUMN, BLOCKS_DIR, REJECTS_DIR, SLOT_COLUMN, PlanWriter
from spark_partitions.plan import GroupStats, Plan, build_plan
from spark_partitions.rules import Reason
from spark_partitions.spark_conf import log_config_option, session_conf
from spark_partitions.spark_read import read_raw
from spark_partitions.spark_rules import normalize

ENGINE = "spark"
VALID = "valid"
_KEY = ["publisher_id", "partition_text"]


# -- the session ------------------------------------------------------------------------------
@contextmanager
def spark_session(settings: SparkSettings) -> Iterator[SparkSession]:
    """A session for one run; stopped afterwards only if this call started it."""
    existing = SparkSession.getActiveSession()
    spark = build_session(settings)
    try:
        yield spark
    finally:
        if existing is None:
            spark.stop()


def build_session(settings: SparkSettings) -> SparkSession:
    """Start (or join) the SparkSession (configured by :mod:`spark_conf`: a quiet log from
    the JVM's start); returns it with the log level already set."""
    builder = SparkSession.builder.appName(settings.app_name)
    if settings.master:
        builder = builder.master(settings.master)
    with log_config_option(settings) as log_option:
        for key, value in session_conf(settings, log_option).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()  # a JVM it starts has read the file when it returns
    spark.sparkContext.setLogLevel(settings.log_level)
    return spark


# -- the job ----------------------------------------------------------------------------------
def run_spark(
    spark: SparkSession, input_path: str, fmt: Format, out_dir: str, config: PlanConfig
) -> Outcome:
    """Plan ``input_path`` into ``out_dir`` with the given session."""
    spark.conf.set("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
    writer = PlanWriter(spark, out_dir)
    writer.clear_plan()
    # Parsed once: cached for the rejects pass and the dedupe pass (valid rows carry no
    # source text, so the cache is about the size of the events).
    rows = normalize(read_raw(spark, input_path, fmt), config.max_payload_bytes)
    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
    valid_rows = rows.filter(F.col("reason").isNull())
    kept = _dedupe(valid_rows, config.dedupe_key).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        reasons = _write_rejects(rows, writer.child(REJECTS_DIR))
        valid = reasons.pop(VALID, 0)
        examples = _reject_examples(spark, writer.child(REJECTS_DIR), config.reject_examples)
        groups = _group_stats(kept)
        rows.unpersist()
        total = sum(group.count for group in groups)
        rejected = sum(reasons.values())
        plan = build_plan(groups, config.subscribers, valid - total, rejected, config.id_scope)
        _write_blocks(spark, kept, plan, writer.child(BLOCKS_DIR), config.shuffle_partitions)
    finally:
        rows.unpersist()
        kept.unpersist()
    writer.write_plan(plan)
    return Outcome(plan, ENGINE, reasons, examples)


def _write_rejects(rows: DataFrame, path: str) -> dict[str, int]:
    """Write the rejected rows; count every row by reason on the way (one pass)."""
    observation = Observation("reasons")
    reason = F.col("reason")
    metrics = [F.count_if(reason.isNull()).alias(VALID)]
    metrics += [F.count_if(reason == r.value).alias(r.value) for r in Reason]
    observed = rows.observe(observation, *metrics)
    observed.filter(reason.isNotNull()).select("reason", "record").write.mode("overwrite").json(
        path
    )
    return {name: count for name, count in observation.get.items() if count}


def _reject_examples(spark: SparkSession, path: str, limit: int) -> list[dict[str, str]]:
    """A few rejected rows, read back from what was just written (a tiny job)."""
    if not limit:
        return []
    rejects = spark.read.schema("reason string, record string").json(path)
    return [row.asDict() for row in rejects.limit(limit).collect()]


def _dedupe(valid: DataFrame, key: tuple[str, ...]) -> DataFrame:
    """One row per dedupe ``key`` (``PlanConfig.dedupe_key``): the one
    :func:`reference.dedupe_rank` ranks first."""
    rank = Window.partitionBy(*key).orderBy(
        "timestamp",
        "publisher_id",
        "partition_text",
        F.col("payload").asc_nulls_first(),
        "partition_is_int",
    )
    ranked = valid.drop("reason", "record").withColumn("_rank", F.row_number().over(rank))
    return ranked.filter(F.col("_rank") == 1).drop("_rank")


def _group_stats(kept: DataFrame) -> list[GroupStats]:
    """The only thing the driver collects: one small row per block."""
    aggregates = kept.groupBy(*_KEY).agg(
        F.count(F.lit(1)).alias("count"),
        F.min("timestamp").alias("first"),
        F.max("timestamp").alias("last"),
        F.min("partition_is_int").alias("all_int"),
    )
    return [
        GroupStats(
            r["publisher_id"], r["partition_text"], r["all_int"], r["count"], r["first"], r["last"]
        )
        for r in aggregates.collect()
    ]


def _write_blocks(
    spark: SparkSession, kept: DataFrame, plan: Plan, path: str, partitions: int
) -> None:
    """Events joined to their block and slot, one shuffle, sorted within each file."""
    index = spark.createDataFrame(
        [(b.publisher_id, str(b.partition), i, b.slot) for i, b in enumerate(plan.blocks)],
        f"publisher_id string, partition_text string, {BLOCK_COLUMN} int, {SLOT_COLUMN} int",
    )
    text = F.col("partition_text")
    partition = text.cast("bigint") if plan.integral_partitions else text
    events = kept.join(F.broadcast(index), _KEY).select(
        "id",
        "publisher_id",
        partition.alias("partition"),
        "timestamp",
        "payload",
        BLOCK_COLUMN,
        SLOT_COLUMN,
    )
    (
        events.repartition(partitions, BLOCK_COLUMN)
        .sortWithinPartitions(BLOCK_COLUMN, "timestamp", "id")
        .write.mode("overwrite")
        .parquet(path)
    )
