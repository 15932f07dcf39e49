"""Fixtures of the spark_partitions tests: one shared SparkSession, batch writers, runners.

Test modules here have distinctive names (no ``__init__.py``, so basenames must not clash
with other test directories).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spark_partitions.blocks import iter_blocks, load_plan
from spark_partitions.config import Outcome, PlanConfig
from spark_partitions.formats import Format
from spark_partitions.reference import run_reference
from spark_partitions.rules import FIELDS

# Python workers (none are expected: no UDFs) would otherwise run the pyenv python3.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

TEST_SHUFFLE_PARTITIONS = 2

Row = dict[str, Any]


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local session for the whole run (notes B3): JVM start-up costs 10-20 s."""
    from pyspark.sql import SparkSession

    scratch = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-partitions-tests")
        .config("spark.sql.shuffle.partitions", str(TEST_SHUFFLE_PARTITIONS))
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.codegen.wholeStage", "false")  # as the CLI runs it
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.local.dir", str(scratch / "local"))
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dderby.system.home={scratch / 'derby'} -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        )
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def write_batch(path: Path, rows: Sequence[Row], fmt: Format) -> Path:
    """Write ``rows`` (dicts; a key left out is a missing field; a str is a raw line)."""
    _WRITERS[fmt](path, rows)
    return path


def _write_jsonl(path: Path, rows: Sequence[Row]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            if isinstance(row, str):  # a raw line, for malformed-input tests
                handle.write(row + "\n")
                continue
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def _write_csv(path: Path, rows: Sequence[Row]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FIELDS)
        for row in rows:
            writer.writerow(_csv_cell(row.get(name)) for name in FIELDS)


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    return repr(value) if type(value) is float else str(value)


def _write_parquet(path: Path, rows: Sequence[Row]) -> None:
    """Parquet columns have one type: partitions are strings if any is, odd values null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {name: [row.get(name) for row in rows] for name in FIELDS}
    textual = any(type(v) is str for v in columns["partition"])
    columns["partition"] = [
        str(v) if textual and v is not None else v for v in columns["partition"]
    ]
    columns["timestamp"] = [
        float(v) if type(v) in (int, float) else None for v in columns["timestamp"]
    ]
    for name in ("id", "publisher_id", "payload"):
        columns[name] = [v if type(v) is str else None for v in columns[name]]
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("publisher_id", pa.string()),
            ("partition", pa.string() if textual else pa.int64()),
            ("timestamp", pa.float64()),
            ("payload", pa.string()),
        ]
    )
    pq.write_table(pa.table(columns, schema=schema), path)


_WRITERS: dict[Format, Callable[[Path, Sequence[Row]], None]] = {
    Format.JSONL: _write_jsonl,
    Format.CSV: _write_csv,
    Format.PARQUET: _write_parquet,
}

SUFFIX = {Format.JSONL: ".jsonl", Format.CSV: ".csv", Format.PARQUET: ".parquet"}


def block_listing(out_dir: Path) -> list[tuple[dict, list[dict]]]:
    """Everything a publisher would read back: each plan block with its events."""
    return list(iter_blocks(str(out_dir)))


def engines_agree(spark, tmp: Path, source: Path, fmt: Format, config: PlanConfig) -> Outcome:
    """Plan ``source`` with both engines and check they agree on everything observable."""
    from spark_partitions.spark_job import run_spark

    reference = run_reference(str(source), fmt, str(tmp / "ref"), config)
    spark_outcome = run_spark(spark, str(source), fmt, str(tmp / "spark"), config)
    assert load_plan(str(tmp / "spark")) == load_plan(str(tmp / "ref"))
    assert (tmp / "spark" / "plan.json").read_text() == (tmp / "ref" / "plan.json").read_text()
    assert spark_outcome.reject_reasons == reference.reject_reasons
    assert block_listing(tmp / "spark") == block_listing(tmp / "ref")
    return reference


def plan_reference(
    tmp: Path, rows: Sequence[Row], fmt: Format, config: PlanConfig
) -> tuple[Outcome, dict]:
    """Write ``rows`` and plan them with the reference; the outcome and plan.json."""
    source = write_batch(tmp / f"input{SUFFIX[fmt]}", rows, fmt)
    outcome = run_reference(str(source), fmt, str(tmp / "ref"), config)
    return outcome, load_plan(str(tmp / "ref"))


def plan_spark(
    spark, tmp: Path, rows: Sequence[Row], fmt: Format, config: PlanConfig
) -> tuple[Outcome, dict]:
    """Write ``rows`` and plan them with the Spark job; the outcome and plan.json."""
    from spark_partitions.spark_job import run_spark

    source = write_batch(tmp / f"input{SUFFIX[fmt]}", rows, fmt)
    outcome = run_spark(spark, str(source), fmt, str(tmp / "spark"), config)
    return outcome, load_plan(str(tmp / "spark"))


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The helpers above, for test modules (importing conftest is fragile)."""
    return SimpleNamespace(
        write_batch=write_batch,
        block_listing=block_listing,
        plan_reference=plan_reference,
        plan_spark=plan_spark,
        engines_agree=engines_agree,
        suffix=SUFFIX,
    )


# Duplicates (one of the same publisher, one of another: "a"), a timestamp tie, a missing
# partition and payload, three rejects (limit 8).
MIXED = [
    {"id": "a", "publisher_id": "p1", "partition": 1, "timestamp": 3.0, "payload": "x"},
    {"id": "b", "publisher_id": "p1", "partition": 1, "timestamp": 1.0, "payload": "y"},
    {"id": "c", "publisher_id": "p1", "partition": 1, "timestamp": 1.0, "payload": "z"},
    {"id": "d", "publisher_id": "p2", "timestamp": 2.0, "payload": "w"},
    {"id": "a", "publisher_id": "p2", "partition": 0, "timestamp": 5.0, "payload": "late"},
    {"id": "e", "publisher_id": "p2", "partition": 0, "timestamp": 0.5},
    {"id": "f", "publisher_id": "bad id", "timestamp": 1.0},
    {"id": "g", "publisher_id": "p3", "partition": 2, "timestamp": None},
    {"id": "h", "publisher_id": "p3", "partition": 2, "timestamp": 4.0, "payload": "too long!"},
    {"id": "i", "publisher_id": "p1", "partition": 1, "timestamp": 2.0, "payload": "m"},
    {"id": "i", "publisher_id": "p1", "partition": 1, "timestamp": 2.0, "payload": "l"},
]

# Ids unique per publisher (the default): p2's "a" is an event of its own, "i" is dropped.
MIXED_PLAN = {
    "subscribers": 2,
    "ids": "publisher",
    "total_events": 7,
    "duplicates_dropped": 1,
    "rejected": 3,
    "blocks": [
        {
            "publisher_id": "p1",
            "partition": 1,
            "count": 4,
            "first_timestamp": 1.0,
            "last_timestamp": 3.0,
            "slot": 0,
        },
        {
            "publisher_id": "p2",
            "partition": 0,
            "count": 3,
            "first_timestamp": 0.5,
            "last_timestamp": 5.0,
            "slot": 1,
        },
    ],
    "slots": [{"slot": 0, "events": 4, "blocks": 1}, {"slot": 1, "events": 3, "blocks": 1}],
    "skew": 1.142857,
}
MIXED_BLOCK_IDS = [["b", "c", "i", "a"], ["e", "d", "a"]]

# Ids unique per channel (--ids channel): p2's later "a" is a duplicate of p1's too.
MIXED_CHANNEL_PLAN = {
    **MIXED_PLAN,
    "ids": "channel",
    "total_events": 6,
    "duplicates_dropped": 2,
    "blocks": [
        MIXED_PLAN["blocks"][0],
        dict(MIXED_PLAN["blocks"][1], count=2, last_timestamp=2.0),
    ],
    "slots": [{"slot": 0, "events": 4, "blocks": 1}, {"slot": 1, "events": 2, "blocks": 1}],
    "skew": 1.333333,
}
MIXED_CHANNEL_BLOCK_IDS = [["b", "c", "i", "a"], ["e", "d"]]

MIXED_REASONS = {
    "publisher_id: must be 1-128 characters of [A-Za-z0-9._-]": 1,
    "timestamp: is required": 1,
    "payload: larger than the payload limit": 1,
}


# Raw JSON lines, each valid or broken in its own way; what the engines must make of them.
JSON_EDGES = [
    "",
    "   ",
    "{broken",
    "[1]",
    '{"id": "u", "publisher_id": "p", "timestamp": 1, "note": 1}',
    '{"id": 7, "publisher_id": "p", "timestamp": 1}',
    '{"id": "n", "publisher_id": "p", "timestamp": NaN}',
    "{'id': 'q', 'publisher_id': 'p', 'timestamp': 1}",
    '{"id": "s", "publisher_id": "p", "timestamp": "5"}',
    '{"id": "b", "publisher_id": "p", "timestamp": true}',
    '{"id": "o", "publisher_id": "p", "timestamp": 1, "payload": {"a": 1}}',
    '{"id": "f", "publisher_id": "p", "timestamp": 1, "partition": 1.5}',
    '{"id": "k", "publisher_id": "p", "timestamp": 1e400}',
    '{"id": "r", "id": "r2", "publisher_id": "p", "timestamp": 1}',
    '{"id": "d", "publisher_id": "p", "timestamp": 0.1, "payload": {"k": 1, "k": 2}}',
    '{"id": "ok", "publisher_id": "p", "timestamp": 1e2, "partition": -4}',
    '{"id": "z", "publisher_id": "p", "timestamp": -0.0, "partition": 3}',
    '{"id": "t", "publisher_id": "p", "timestamp": 0.30000000000000004}',
]
JSON_EDGE_REASONS = {
    "malformed JSON": 5,
    "not a JSON object": 1,
    "unknown field": 1,
    "id: must be a non-empty string": 1,
    "timestamp: must be a number": 2,
    "payload: must be a string": 1,
    "partition: must be a string or an integer": 1,
    "timestamp: must be finite": 1,
}


@pytest.fixture(scope="session")
def json_edges() -> SimpleNamespace:
    """JSON lines that keep their types, break the syntax, or are blank (skipped)."""
    return SimpleNamespace(lines=JSON_EDGES, reasons=JSON_EDGE_REASONS, events=3)


@pytest.fixture(scope="session")
def mixed() -> SimpleNamespace:
    """A batch with duplicates, a tie, defaults and rejects, and its known plan (and block
    ids) per id scope: ``plan`` for the default, ``channel_plan`` for ``--ids channel``."""
    return SimpleNamespace(
        rows=MIXED,
        plan=MIXED_PLAN,
        block_ids=MIXED_BLOCK_IDS,
        channel_plan=MIXED_CHANNEL_PLAN,
        channel_block_ids=MIXED_CHANNEL_BLOCK_IDS,
        reasons=MIXED_REASONS,
    )


@pytest.fixture
def small_config() -> PlanConfig:
    """Two slots, a tiny payload limit so the size rule is cheap to hit."""
    return PlanConfig(subscribers=2, max_payload_bytes=8, shuffle_partitions=2)
