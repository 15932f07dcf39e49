"""The reference's fast path: the same plan computed on Arrow columns with pyarrow.

It applies when every column already has a type the rules accept as a whole: Parquet with
string, signed-integer and float columns, and JSON lines that pyarrow's reader parses into
such columns (it refuses repeated keys, mixed types and non-objects, and NaN makes us
refuse). Then a column's type is each value's kind, and the row rules reduce to the
column checks below. Anything else returns None from :func:`load_table` and goes through
the row-by-row path of :mod:`spark_partitions.reference`, which handles every case; the
two paths are checked against each other in the tests.

A rejected JSON line's ``record`` is the row re-serialised, not the raw line.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from spark_partitions.config import PlanConfig
from spark_partitions.formats import Format, data_files
from spark_partitions.output import (
    BLOCK_COLUMN,
    BLOCK_ROW_GROUP_ROWS,
    SLOT_COLUMN,
    RejectSink,
    block_schema,
)
from spark_partitions.plan import GroupStats, Plan, build_plan
from spark_partitions.reader import check_columns
from spark_partitions.rules import (
    DEFAULT_PARTITION,
    FIELDS,
    MAX_ID_CHARS,
    MAX_PARTITION_CHARS,
    PUBLISHER_ID_BODY,
    Reason,
)

_KEY = ["publisher_id", "partition_text"]
# pyarrow's JSON reader: the four fields whose type is known up front.
_JSON_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("publisher_id", pa.string()),
        ("timestamp", pa.float64()),
        ("payload", pa.string()),
    ]
)


# -- loading ------------------------------------------------------------------------------
def load_table(path: str, fmt: Format) -> pa.Table | None:
    """The input as one table of the five fields, or None when only the row path can tell."""
    if fmt is Format.PARQUET:
        table = _read_parquet(path)
    elif fmt is Format.JSONL:
        table = _read_jsonl(path)
    else:
        return None
    return _typed(table) if table is not None else None


def _read_parquet(path: str) -> pa.Table | None:
    import pyarrow.parquet as pq

    tables = []
    for file in data_files(path):
        table = pq.read_table(file)
        check_columns(table.column_names, str(file))
        tables.append(table)
    return _concat(tables)


def _read_jsonl(path: str) -> pa.Table | None:
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=_JSON_SCHEMA, unexpected_field_behavior="infer")
    tables = []
    for file in data_files(path):
        if file.stat().st_size == 0:
            continue
        try:
            table = pj.read_json(file, parse_options=options)
        except pa.ArrowInvalid:
            return None
        if not set(table.column_names) <= set(FIELDS):
            return None  # unknown keys: rejected row by row
        tables.append(table)
    table = _concat(tables)
    if table is None or "timestamp" not in table.column_names:
        return table
    if pc.any(pc.invert(pc.is_finite(table["timestamp"]))).as_py():
        return None  # NaN / Infinity literals, which the row path calls malformed
    return table


def _concat(tables: list[pa.Table]) -> pa.Table | None:
    if not tables:
        return _empty()
    try:
        return pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def _empty() -> pa.Table:
    return _JSON_SCHEMA.empty_table()


def _typed(table: pa.Table) -> pa.Table | None:
    """All five fields with their canonical types, or None if a type needs the row path."""
    columns = {}
    for name in FIELDS:
        column = table[name] if name in table.column_names else None
        columns[name] = _canonical(name, column, table.num_rows)
        if columns[name] is None:
            return None
    return pa.table(columns).combine_chunks()


def _canonical(name: str, column, rows: int):
    kind = pa.null() if column is None else column.type
    if pa.types.is_null(kind):
        return pa.nulls(rows, pa.float64() if name == "timestamp" else pa.string())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return column.cast(pa.string()) if name != "timestamp" else None
    if pa.types.is_signed_integer(kind) and name == "partition":
        return column.cast(pa.int64())
    numeric = pa.types.is_signed_integer(kind) or pa.types.is_floating(kind)
    if numeric and name == "timestamp":
        return column.cast(pa.float64(), safe=False)  # rounds big ints like float() does
    return None


# -- validation ---------------------------------------------------------------------------
Check = Callable[[pa.Table, int], pa.Array]


def _checks() -> list[tuple[Reason, Check]]:
    """The row rules that can fail once the types are right, in rules.check order."""
    publisher_re = f"^(?:{PUBLISHER_ID_BODY})$"  # RE2: $ is the very end of the text
    return [
        (Reason.ID_REQUIRED, lambda t, _: pc.is_null(t["id"])),
        (Reason.ID_TYPE, lambda t, _: pc.equal(t["id"], "")),
        (Reason.ID_LENGTH, lambda t, _: pc.greater(pc.utf8_length(t["id"]), MAX_ID_CHARS)),
        (Reason.PUBLISHER_REQUIRED, lambda t, _: pc.is_null(t["publisher_id"])),
        (
            Reason.PUBLISHER_FORMAT,
            lambda t, _: pc.invert(pc.match_substring_regex(t["publisher_id"], publisher_re)),
        ),
        (Reason.PARTITION_LENGTH, _bad_partition_text),
        (Reason.TIMESTAMP_REQUIRED, lambda t, _: pc.is_null(t["timestamp"])),
        (Reason.TIMESTAMP_FINITE, lambda t, _: pc.invert(pc.is_finite(t["timestamp"]))),
        (Reason.PAYLOAD_SIZE, lambda t, limit: pc.greater(pc.binary_length(t["payload"]), limit)),
    ]


def _bad_partition_text(table: pa.Table, _: int) -> pa.Array:
    column = table["partition"]
    if not pa.types.is_string(column.type):
        return pa.nulls(table.num_rows, pa.bool_())
    length = pc.utf8_length(column)
    return pc.or_(pc.equal(length, 0), pc.greater(length, MAX_PARTITION_CHARS))


def first_reason(table: pa.Table, limit: int) -> pa.Array:
    """Per row, the reason of the first failing check, or null for a valid row."""
    reason = pa.nulls(table.num_rows, pa.string())
    for name, check in reversed(_checks()):
        failed = pc.fill_null(check(table, limit), False)
        reason = pc.if_else(failed, pa.scalar(name.value), reason)
    return reason


# -- the plan -----------------------------------------------------------------------------
def plan_columnar(table: pa.Table, blocks_file: Path, config: PlanConfig, sink: RejectSink) -> Plan:
    """Validate, dedupe, group and plan ``table``; write its blocks file."""
    reason = first_reason(table, config.max_payload_bytes)
    _reject(table.filter(pc.is_valid(reason)), reason.filter(pc.is_valid(reason)), sink)
    valid = _clean(table.filter(pc.is_null(reason)))
    kept = _dedupe(valid, config.dedupe_key)
    stats = _group_stats(kept)
    dropped = valid.num_rows - kept.num_rows
    plan = build_plan(stats, config.subscribers, dropped, sink.total, config.id_scope)
    _write_blocks(kept, plan, blocks_file)
    return plan


def _reject(rows: pa.Table, reasons: pa.Array, sink: RejectSink) -> None:
    for row, reason in zip(rows.to_pylist(), reasons.to_pylist(), strict=True):
        sink.add(reason, json.dumps(row, default=str, ensure_ascii=False))


def _clean(valid: pa.Table) -> pa.Table:
    """Valid rows as rules.Clean columns: partition as text plus whether it was an int."""
    partition = valid["partition"]
    default = str(DEFAULT_PARTITION)
    is_int = pc.is_null(partition)
    if not pa.types.is_string(partition.type):
        partition = partition.cast(pa.string())
        is_int = pc.is_valid(pc.fill_null(partition, default))
    timestamp = valid["timestamp"]
    return pa.table(
        {
            "id": valid["id"],
            "publisher_id": valid["publisher_id"],
            "partition_text": pc.fill_null(partition, default),
            "partition_is_int": is_int,
            "timestamp": pc.if_else(pc.equal(timestamp, 0.0), 0.0, timestamp),
            "payload": valid["payload"],
        }
    )


def _dedupe(valid: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """The first row per dedupe ``key`` (PlanConfig.dedupe_key) in reference.dedupe_rank
    order (payload nulls first): sorted by key then rank, a row is kept where the key
    changes."""
    rank = ["timestamp", "publisher_id", "partition_text", "payload", "partition_is_int"]
    sort_keys = [(k, "ascending", "at_start") for k in (*key, *rank)]
    ranked = valid.take(pc.sort_indices(valid, sort_keys=sort_keys)).combine_chunks()
    if ranked.num_rows < 2:
        return ranked
    columns = [ranked[name].combine_chunks() for name in key]
    changed = functools.reduce(pc.or_, (pc.not_equal(c[1:], c[:-1]) for c in columns))
    return ranked.filter(pa.concat_arrays([pa.array([True]), changed]))


def _group_stats(kept: pa.Table) -> list[GroupStats]:
    aggregates = kept.group_by(_KEY).aggregate(
        [("id", "count"), ("timestamp", "min"), ("timestamp", "max"), ("partition_is_int", "all")]
    )
    return [
        GroupStats(
            r["publisher_id"],
            r["partition_text"],
            r["partition_is_int_all"],
            r["id_count"],
            r["timestamp_min"],
            r["timestamp_max"],
        )
        for r in aggregates.to_pylist()
    ]


def _write_blocks(kept: pa.Table, plan: Plan, path: Path) -> None:
    import pyarrow.parquet as pq

    index = pa.table(
        {
            "publisher_id": pa.array([b.publisher_id for b in plan.blocks], pa.string()),
            "partition_text": pa.array([str(b.partition) for b in plan.blocks], pa.string()),
            BLOCK_COLUMN: pa.array(range(len(plan.blocks)), pa.int32()),
            SLOT_COLUMN: pa.array([b.slot for b in plan.blocks], pa.int32()),
        }
    )
    integral = plan.integral_partitions
    joined = kept.join(index, keys=_KEY)
    rows = joined.sort_by(
        [(BLOCK_COLUMN, "ascending"), ("timestamp", "ascending"), ("id", "ascending")]
    )
    partition = rows["partition_text"].cast(pa.int64()) if integral else rows["partition_text"]
    schema = block_schema(integral)
    columns = [rows[name] if name != "partition" else partition for name in schema.names]
    pq.write_table(pa.table(columns, schema=schema), path, row_group_size=BLOCK_ROW_GROUP_ROWS)
