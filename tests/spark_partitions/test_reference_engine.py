"""The pure-Python engine on tiny hand-made batches, in every input format."""

from __future__ import annotations

import json

import pytest

from spark_partitions.config import InputError, PlanConfig
from spark_partitions.formats import Format
from spark_partitions.reference import run_reference

FORMATS = list(Format)


@pytest.mark.parametrize("fmt", FORMATS)
def test_mixed_batch_plan(kit, tmp_path, small_config, fmt, mixed):
    outcome, plan = kit.plan_reference(tmp_path, mixed.rows, fmt, small_config)
    assert plan == mixed.plan
    assert outcome.reject_reasons == mixed.reasons
    blocks = kit.block_listing(tmp_path / "ref")
    assert [[e["id"] for e in events] for _, events in blocks] == mixed.block_ids
    assert [block for block, _ in blocks] == mixed.plan["blocks"]
    first = blocks[0][1]
    assert first[2] == {
        "id": "i",
        "publisher_id": "p1",
        "partition": 1,
        "timestamp": 2.0,
        "payload": "l",
    }
    assert blocks[1][1][0]["payload"] is None


def test_every_reject_is_written_with_its_reason(kit, tmp_path, small_config, mixed):
    kit.plan_reference(tmp_path, mixed.rows, Format.JSONL, small_config)
    files = list((tmp_path / "ref" / "rejects").glob("*.json"))
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert sorted(r["reason"] for r in lines) == sorted(mixed.reasons)
    assert {json.loads(r["record"])["id"] for r in lines} == {"f", "g", "h"}


SAME_ID = [
    {"id": "x", "publisher_id": "p2", "partition": 0, "timestamp": 1.0},
    {"id": "x", "publisher_id": "p1", "partition": 5, "timestamp": 1.0},
    {"id": "x", "publisher_id": "p1", "partition": 3, "timestamp": 1.0},
    {"id": "x", "publisher_id": "p0", "partition": 0, "timestamp": 2.0},
]
"""One id, three publishers: p1 sends it twice (a tie on the timestamp)."""


def _kept(plan: dict) -> list[tuple[str, int]]:
    return sorted((b["publisher_id"], b["partition"]) for b in plan["blocks"])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("columnar", [True, False])
def test_the_same_id_of_two_publishers_is_two_events(tmp_path, kit, fmt, columnar):
    # Ids are unique per publisher on a channel by default: only p1's repeat is a duplicate
    source = kit.write_batch(tmp_path / f"in{kit.suffix[fmt]}", SAME_ID, fmt)
    out = tmp_path / "ref"
    outcome = run_reference(str(source), fmt, str(out), PlanConfig(1), columnar=columnar)
    plan = json.loads((out / "plan.json").read_text())
    assert _kept(plan) == [("p0", 0), ("p1", 3), ("p2", 0)]
    assert (plan["duplicates_dropped"], plan["ids"]) == (1, "publisher")
    assert "1 duplicates dropped (same publisher_id and id)" in outcome.summary()


@pytest.mark.parametrize("columnar", [True, False])
def test_ids_channel_keeps_one_row_per_id_smallest_publisher_then_partition(
    tmp_path, kit, columnar
):
    source = kit.write_batch(tmp_path / "in.jsonl", SAME_ID, Format.JSONL)
    config = PlanConfig(subscribers=1, id_scope="channel")
    outcome = run_reference(str(source), Format.JSONL, str(tmp_path / "ref"), config, columnar)
    plan = json.loads((tmp_path / "ref" / "plan.json").read_text())
    assert _kept(plan) == [("p1", 3)]
    assert (plan["duplicates_dropped"], plan["ids"]) == (3, "channel")
    assert "3 duplicates dropped (same id, any publisher)" in outcome.summary()


@pytest.mark.parametrize(
    ("fmt", "partitions", "expected"),
    [
        (Format.JSONL, [1, "1", 2], ["1", "2"]),
        (Format.JSONL, [1, None, 2], [0, 1, 2]),
        (Format.CSV, ["1", "2", "x"], ["1", "2", "x"]),
        (Format.CSV, ["1", "02"], ["02", "1"]),
        (Format.CSV, ["1", None], [0, 1]),
        (Format.PARQUET, ["1", "2"], ["1", "2"]),
        (Format.PARQUET, [1, 2], [1, 2]),
    ],
)
def test_partitions_are_ints_only_when_the_column_is_integral(
    kit, tmp_path, fmt, partitions, expected
):
    rows = [
        {"id": f"e{n}", "publisher_id": "p", "partition": part, "timestamp": 1.0}
        for n, part in enumerate(partitions)
    ]
    _, plan = kit.plan_reference(tmp_path, rows, fmt, PlanConfig(subscribers=1))
    assert sorted(b["partition"] for b in plan["blocks"]) == expected


def test_json_lines_edge_cases(kit, tmp_path, json_edges):
    outcome, plan = kit.plan_reference(
        tmp_path, json_edges.lines, Format.JSONL, PlanConfig(subscribers=1)
    )
    assert outcome.reject_reasons == json_edges.reasons
    assert plan["total_events"] == json_edges.events
    assert sorted(b["partition"] for b in plan["blocks"]) == [-4, 0, 3]
    events = {e["id"]: e for _, block in kit.block_listing(tmp_path / "ref") for e in block}
    assert events["ok"]["timestamp"] == 100.0
    assert str(events["z"]["timestamp"]) == "0.0"


def test_csv_edge_cases(kit, tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(
        "timestamp,id,publisher_id,payload\n"
        '1.5,a,p,"line one\nline two"\n'
        "2,b,p\n"
        '3,c,p,"say ""hi"""\n'
        "\n"
        "nan,d,p,x\n",
        encoding="utf-8",
    )
    outcome = run_reference(str(path), Format.CSV, str(tmp_path / "out"), PlanConfig(1))
    assert outcome.reject_reasons == {
        "wrong number of CSV fields": 1,
        "timestamp: must be a number": 1,
    }
    events = kit.block_listing(tmp_path / "out")[0][1]
    assert [(e["id"], e["payload"]) for e in events] == [
        ("a", "line one\nline two"),
        ("c", 'say "hi"'),
    ]


@pytest.mark.parametrize("fmt", [Format.CSV, Format.PARQUET])
def test_unknown_columns_refuse_the_whole_input(kit, tmp_path, fmt):
    rows = [{"id": "a", "publisher_id": "p", "timestamp": 1.0}]
    path = kit.write_batch(tmp_path / f"in{kit.suffix[fmt]}", rows, fmt)
    if fmt is Format.CSV:
        path.write_text("id,publisher_id,timestamp,colour\na,p,1,red\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"id": ["a"], "colour": ["red"]}), path)
    with pytest.raises(InputError, match="unknown column 'colour'"):
        run_reference(str(path), fmt, str(tmp_path / "out"), PlanConfig(1))


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_batch(kit, tmp_path, fmt):
    outcome, plan = kit.plan_reference(tmp_path, [], fmt, PlanConfig(subscribers=3))
    assert plan["total_events"] == 0
    assert plan["blocks"] == []
    assert plan["skew"] == 1.0
    assert [s["events"] for s in plan["slots"]] == [0, 0, 0]
    assert kit.block_listing(tmp_path / "ref") == []
    assert outcome.reject_reasons == {}


def test_rerun_replaces_the_previous_output(kit, tmp_path, mixed):
    out = tmp_path / "ref"
    kit.plan_reference(tmp_path, mixed.rows, Format.JSONL, PlanConfig(subscribers=2))
    (out / "blocks" / "stale.parquet").write_bytes(b"junk")
    rows = [{"id": "z", "publisher_id": "p", "timestamp": 1.0}]
    _, plan = kit.plan_reference(tmp_path, rows, Format.JSONL, PlanConfig(subscribers=2))
    assert plan["total_events"] == 1
    assert not (out / "blocks" / "stale.parquet").exists()
    assert [e["id"] for _, events in kit.block_listing(out) for e in events] == ["z"]


def test_a_directory_of_files_is_one_input(kit, tmp_path, small_config, mixed):
    folder = tmp_path / "batch"
    folder.mkdir()
    kit.write_batch(folder / "part-1.jsonl", mixed.rows[:3], Format.JSONL)
    kit.write_batch(folder / "part-2.jsonl", mixed.rows[3:], Format.JSONL)
    (folder / "_SUCCESS").write_text("")
    outcome = run_reference(str(folder), Format.JSONL, str(tmp_path / "out"), small_config)
    assert outcome.plan.to_json() == mixed.plan
