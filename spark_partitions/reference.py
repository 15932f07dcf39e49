"""The pure-Python engine: the same plan as the Spark job, for batches that fit in memory.

Two paths, one result: :mod:`spark_partitions.columnar` (pyarrow, about ten times faster)
when the input's column types already satisfy the rules as a whole, and the row-by-row
path here for everything else (CSV, mixed-type JSON lines, odd Parquet types). Either holds
the valid events in memory, so the reference is for batches that fit one machine; the
Spark job is for the rest. Rows that are one event (the same
:attr:`~spark_partitions.config.PlanConfig.dedupe_key`: ``(publisher_id, id)``, or the id
alone for a channel with ids unique per channel) keep the row that sorts first by
:func:`dedupe_rank`, the exact order the Spark job's window uses.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Hashable, Iterable
from pathlib import Path

from spark_partitions.config import Outcome, PlanConfig
from spark_partitions.formats import Format
from spark_partitions.output import (
    BLOCK_COLUMN,
    BLOCK_ROW_GROUP_ROWS,
    BLOCKS_DIR,
    BLOCKS_FILE,
    REJECTS_DIR,
    REJECTS_FILE,
    SLOT_COLUMN,
    RejectSink,
    block_schema,
    prepare_local,
    write_plan_local,
)
from spark_partitions.plan import Block, GroupStats, Plan, build_plan
from spark_partitions.reader import RawRow, read_rows, source_text
from spark_partitions.rules import Clean, check

ENGINE = "reference"

Key = tuple[str, str]


def dedupe_rank(event: Clean) -> tuple[object, ...]:
    """Which of two rows with one dedupe key is kept: the smaller rank.

    Earliest timestamp; then the smallest publisher_id, partition text, payload (null
    first), and an int partition before the same text as a string. Every field of the
    output is in the rank, so equal ranks mean equal events and the choice cannot matter.
    """
    payload = event.payload
    return (
        event.timestamp,
        event.publisher_id,
        event.partition,
        payload is not None,
        payload or "",
        event.partition_is_int,
    )


def run_reference(
    input_path: str, fmt: Format, out_dir: str, config: PlanConfig, columnar: bool = True
) -> Outcome:
    """Plan ``input_path`` into ``out_dir`` without Spark.

    Columnar (pyarrow) when the input's column types allow it, else row by row;
    ``columnar=False`` forces the row path (the tests compare the two).
    """
    from spark_partitions.columnar import load_table, plan_columnar

    table = load_table(input_path, fmt) if columnar else None
    root = prepare_local(out_dir)
    with (root / REJECTS_DIR / REJECTS_FILE).open("w", encoding="utf-8") as handle:
        sink = RejectSink(handle, config.reject_examples)
        if table is not None:
            plan = plan_columnar(table, root / BLOCKS_DIR / BLOCKS_FILE, config, sink)
        else:
            plan = _plan_rows(
                read_rows(input_path, fmt), root / BLOCKS_DIR / BLOCKS_FILE, config, sink
            )
    write_plan_local(plan, root)
    return Outcome(plan, ENGINE, dict(sink.reasons), sink.examples)


def _plan_rows(
    rows: Iterable[RawRow], blocks_file: Path, config: PlanConfig, sink: RejectSink
) -> Plan:
    """The row-by-row path: any input, one Python check per row."""
    kept, valid = _validate_and_dedupe(rows, config, sink)
    groups = _group(kept.values())
    stats = [_stats(key, events) for key, events in groups.items()]
    plan = build_plan(stats, config.subscribers, valid - len(kept), sink.total, config.id_scope)
    _write_blocks(plan, groups, blocks_file)
    return plan


def _validate_and_dedupe(
    rows: Iterable[RawRow], config: PlanConfig, sink: RejectSink
) -> tuple[dict[Hashable, Clean], int]:
    """The kept row of each dedupe key, and how many rows were valid."""
    key_of = operator.attrgetter(*config.dedupe_key)
    kept: dict[Hashable, Clean] = {}
    valid = 0
    for values, reason, source in rows:
        if reason is None:
            assert values is not None  # the reader gives a row's values or why it has none
            result = check(values, config.max_payload_bytes)
        else:
            result = reason
        if isinstance(result, Clean):
            valid += 1
            key = key_of(result)
            held = kept.get(key)
            if held is None or dedupe_rank(result) < dedupe_rank(held):
                kept[key] = result
        else:
            sink.add(result, source_text(source))
    return kept, valid


def _group(events: Iterable[Clean]) -> dict[Key, list[Clean]]:
    groups: dict[Key, list[Clean]] = defaultdict(list)
    for event in events:
        groups[(event.publisher_id, event.partition)].append(event)
    for members in groups.values():
        members.sort(key=lambda event: (event.timestamp, event.id))
    return groups


def _stats(key: Key, events: list[Clean]) -> GroupStats:
    return GroupStats(
        publisher_id=key[0],
        partition_text=key[1],
        all_int=all(event.partition_is_int for event in events),
        count=len(events),
        first_timestamp=events[0].timestamp,
        last_timestamp=events[-1].timestamp,
    )


def _write_blocks(plan: Plan, groups: dict[Key, list[Clean]], path: Path) -> None:
    """One Parquet file in plan order, each block's rows in (timestamp, id) order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = block_schema(plan.integral_partitions)
    columns: dict[str, list] = {name: [] for name in schema.names}
    for index, block in enumerate(plan.blocks):
        _extend(columns, index, block, groups[block.key])
    table = pa.Table.from_pydict(columns, schema=schema)
    pq.write_table(table, path, row_group_size=BLOCK_ROW_GROUP_ROWS)


def _extend(columns: dict[str, list], index: int, block: Block, events: list[Clean]) -> None:
    count = len(events)
    columns["id"].extend(event.id for event in events)
    columns["publisher_id"].extend([block.publisher_id] * count)
    columns["partition"].extend([block.partition] * count)
    columns["timestamp"].extend(event.timestamp for event in events)
    columns["payload"].extend(event.payload for event in events)
    columns[BLOCK_COLUMN].extend([index] * count)
    columns[SLOT_COLUMN].extend([block.slot] * count)
