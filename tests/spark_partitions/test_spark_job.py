"""The Spark job against the reference on hand-made batches (one shared session)."""

from __future__ import annotations

import json

import pytest

from spark_partitions.config import InputError, PlanConfig
from spark_partitions.formats import Format

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("fmt", list(Format))
def test_mixed_batch_matches_the_known_plan(spark, kit, tmp_path, mixed, small_config, fmt):
    source = kit.write_batch(tmp_path / f"in{kit.suffix[fmt]}", mixed.rows, fmt)
    outcome = kit.engines_agree(spark, tmp_path, source, fmt, small_config)
    assert outcome.plan.to_json() == mixed.plan
    events = kit.block_listing(tmp_path / "spark")
    assert [[e["id"] for e in block] for _, block in events] == mixed.block_ids


def test_ids_channel_dedupes_across_publishers_like_the_reference(spark, kit, tmp_path, mixed):
    source = kit.write_batch(tmp_path / "in.jsonl", mixed.rows, Format.JSONL)
    config = PlanConfig(2, max_payload_bytes=8, shuffle_partitions=2, id_scope="channel")
    outcome = kit.engines_agree(spark, tmp_path, source, Format.JSONL, config)
    assert outcome.plan.to_json() == mixed.channel_plan
    events = kit.block_listing(tmp_path / "spark")
    assert [[e["id"] for e in block] for _, block in events] == mixed.channel_block_ids


def test_rejects_dataset_has_every_rejected_row(spark, kit, tmp_path, mixed, small_config):
    outcome, _ = kit.plan_spark(spark, tmp_path, mixed.rows, Format.JSONL, small_config)
    files = (tmp_path / "spark" / "rejects").glob("part-*.json")
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert sorted(r["reason"] for r in lines) == sorted(mixed.reasons)
    assert {json.loads(r["record"])["id"] for r in lines} == {"f", "g", "h"}
    assert len(outcome.reject_examples) == 3
    assert {e["reason"] for e in outcome.reject_examples} == set(mixed.reasons)


def test_json_lines_types_are_kept(spark, kit, tmp_path, json_edges):
    source = kit.write_batch(tmp_path / "in.jsonl", json_edges.lines, Format.JSONL)
    outcome = kit.engines_agree(spark, tmp_path, source, Format.JSONL, PlanConfig(1))
    assert outcome.reject_reasons == json_edges.reasons
    assert outcome.plan.total_events == json_edges.events


def test_csv_quoting_and_field_counts(spark, kit, tmp_path):
    source = tmp_path / "in.csv"
    source.write_text(
        "timestamp,id,publisher_id,payload,partition\n"
        '1.5,a,p,"line one\nline two",7\n'
        "2,b,p\n"
        '3,c,p,"say ""hi""",007\n'
        "\n"
        "nan,d,p,x,1\n"
        "1e400,e,p,x,1\n"
        "4,f,p,,\n",
        encoding="utf-8",
    )
    outcome = kit.engines_agree(spark, tmp_path, source, Format.CSV, PlanConfig(1))
    assert outcome.reject_reasons == {
        "wrong number of CSV fields": 1,
        "timestamp: must be a number": 1,
        "timestamp: must be finite": 1,
    }
    assert sorted(b.partition for b in outcome.plan.blocks) == ["0", "007", "7"]


@pytest.mark.parametrize(
    ("fmt", "partitions"),
    [
        (Format.JSONL, [1, "1", 2]),
        (Format.JSONL, [1, None, 2]),
        (Format.CSV, ["1", "02"]),
        (Format.PARQUET, ["1", "2"]),
        (Format.PARQUET, [5, None]),
    ],
)
def test_partition_typing_matches(spark, kit, tmp_path, fmt, partitions):
    rows = [
        {"id": f"e{n}", "publisher_id": "p", "partition": part, "timestamp": float(n % 2)}
        for n, part in enumerate(partitions)
    ]
    source = kit.write_batch(tmp_path / f"in{kit.suffix[fmt]}", rows, fmt)
    kit.engines_agree(spark, tmp_path, source, fmt, PlanConfig(2))


@pytest.mark.parametrize("fmt", list(Format))
def test_empty_batch(spark, kit, tmp_path, fmt):
    source = kit.write_batch(tmp_path / f"in{kit.suffix[fmt]}", [], fmt)
    outcome = kit.engines_agree(spark, tmp_path, source, fmt, PlanConfig(3))
    assert outcome.plan.skew == 1.0
    assert outcome.plan.total_events == 0


def test_unknown_csv_column_refuses_the_input(spark, tmp_path):
    from spark_partitions.spark_job import run_spark

    source = tmp_path / "in.csv"
    source.write_text("id,publisher_id,timestamp,colour\na,p,1,red\n")
    with pytest.raises(InputError, match="unknown column 'colour'"):
        run_spark(spark, str(source), Format.CSV, str(tmp_path / "out"), PlanConfig(1))
    assert not (tmp_path / "out" / "plan.json").exists()


def test_rerun_overwrites_blocks_and_plan(spark, kit, tmp_path, mixed, small_config):
    kit.plan_spark(spark, tmp_path, mixed.rows, Format.PARQUET, small_config)
    rows = [{"id": "z", "publisher_id": "p", "partition": 1, "timestamp": 1.0}]
    _, plan = kit.plan_spark(spark, tmp_path, rows, Format.PARQUET, small_config)
    assert plan["total_events"] == 1
    listing = kit.block_listing(tmp_path / "spark")
    assert [e["id"] for _, events in listing for e in events] == ["z"]


def test_cli_plans_with_spark_and_leaves_a_shared_session_running(spark, kit, tmp_path, mixed):
    from spark_partitions.cli import main

    source = kit.write_batch(tmp_path / "in.parquet", mixed.rows, Format.PARQUET)
    out = tmp_path / "out"
    args = ["plan", str(source), "--subscribers", "2", "--out", str(out), "--engine", "spark"]
    assert main([*args, "--max-payload-bytes", "8"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan == mixed.plan
    assert spark.range(3).count() == 3  # the CLI joined the session and did not stop it
