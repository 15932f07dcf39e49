"""Reading a plan back block by block: order, merging files, and refusing bad outputs."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_partitions.blocks import iter_blocks, load_plan
from spark_partitions.config import InputError
from spark_partitions.output import block_schema, write_plan_local
from spark_partitions.plan import GroupStats, build_plan


def _plan_dir(tmp_path, sizes: dict[tuple[str, str], int]):
    groups = [GroupStats(p, part, True, n, 0.0, float(n)) for (p, part), n in sizes.items()]
    plan = build_plan(groups, subscribers=2, duplicates_dropped=0, rejected=0)
    (tmp_path / "blocks").mkdir()
    write_plan_local(plan, tmp_path)
    return plan


def _rows(plan, block_index: int, timestamps: list[float]) -> list[dict]:
    block = plan.blocks[block_index]
    return [
        {
            "id": f"{block.publisher_id}-{block.partition}-{n}",
            "publisher_id": block.publisher_id,
            "partition": block.partition,
            "timestamp": ts,
            "payload": None,
            "block": block_index,
            "slot": block.slot,
        }
        for n, ts in enumerate(timestamps)
    ]


def _write(path, rows: list[dict]) -> None:
    pq.write_table(pa.Table.from_pylist(rows, schema=block_schema(True)), path)


def test_blocks_spread_over_files_come_back_whole_and_in_plan_order(tmp_path):
    plan = _plan_dir(tmp_path, {("a", "1"): 3, ("b", "2"): 2, ("c", "3"): 1})
    rows0, rows1, rows2 = (_rows(plan, i, ts) for i, ts in enumerate([[1, 2, 3], [1, 5], [0]]))
    # Any split is fine as long as each file is sorted by (block, timestamp, id).
    _write(tmp_path / "blocks" / "part-1.parquet", [rows0[0], rows0[2], rows2[0]])
    _write(tmp_path / "blocks" / "part-0.parquet", [rows0[1], *rows1])
    (tmp_path / "blocks" / "_SUCCESS").write_text("")
    listing = list(iter_blocks(str(tmp_path)))
    assert [block for block, _ in listing] == load_plan(str(tmp_path))["blocks"]
    assert [[e["timestamp"] for e in events] for _, events in listing] == [[1, 2, 3], [1, 5], [0]]
    assert set(listing[0][1][0]) == {"id", "publisher_id", "partition", "timestamp", "payload"}


def test_a_block_with_fewer_rows_than_planned_is_refused(tmp_path):
    plan = _plan_dir(tmp_path, {("a", "1"): 3})
    _write(tmp_path / "blocks" / "part-0.parquet", _rows(plan, 0, [1, 2]))
    with pytest.raises(InputError, match=r"do not match plan\.json at block 0"):
        list(iter_blocks(str(tmp_path)))


def test_a_planned_block_missing_from_the_files_is_refused(tmp_path):
    plan = _plan_dir(tmp_path, {("a", "1"): 2, ("b", "1"): 1})
    _write(tmp_path / "blocks" / "part-0.parquet", _rows(plan, 0, [1, 2]))
    with pytest.raises(InputError, match="1 planned blocks have no events"):
        list(iter_blocks(str(tmp_path)))


def test_no_plan_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match=r"no plan\.json"):
        load_plan(str(tmp_path))


def test_load_plan_reads_file_uris(tmp_path):
    _plan_dir(tmp_path, {("a", "1"): 1})
    assert load_plan(tmp_path.as_uri()) == json.loads((tmp_path / "plan.json").read_text())


def test_blocks_are_yielded_lazily(tmp_path):
    plan = _plan_dir(tmp_path, {("a", "1"): 2, ("b", "1"): 1})
    _write(tmp_path / "blocks" / "part-0.parquet", _rows(plan, 0, [1, 2]) + _rows(plan, 1, [1]))
    blocks = iter_blocks(str(tmp_path))
    first, events = next(blocks)
    assert (first["publisher_id"], len(events)) == ("a", 2)
    (tmp_path / "plan.json").unlink()  # already loaded: the iterator keeps going
    assert [len(events) for _, events in blocks] == [1]
