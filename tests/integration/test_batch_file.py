"""Publishing a batch file: directly (--spark never) and through the Spark plan."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.procs import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BASE_TS = 1_700_000_000.0
EXIT_PARTIAL = 7
"""Some rows were invalid and not published (the batch has one)."""


def write_batch(path: Path) -> tuple[set[str], dict[tuple[str, int], list[str]]]:
    """A small batch out of timestamp order, with a duplicate id and an invalid row.
    Returns the valid ids and, per (publisher, partition), the ids in timestamp order."""
    rows = []
    for i in range(40):
        ts = BASE_TS + (i * 7) % 40  # shuffled timestamps
        rows.append(
            {
                "id": f"e{i}",
                "publisher_id": f"p{i % 2}",
                "partition": i % 3,
                "timestamp": ts,
                "payload": f"payload {i}",
            }
        )
    rows.append(dict(rows[5], payload="the same id again"))
    rows.append({"id": "bad", "publisher_id": "not valid!", "timestamp": BASE_TS, "payload": ""})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    valid = rows[:40]
    order: dict[tuple[str, int], list[str]] = {}
    for r in sorted(valid, key=lambda r: (r["timestamp"], r["id"])):
        order.setdefault((r["publisher_id"], r["partition"]), []).append(r["id"])
    return {r["id"] for r in valid}, order


def publish_file(
    cluster: Cluster, path: Path, mode: str, timeout_s: float = 60, *extra: str
) -> subprocess.CompletedProcess:
    return cluster.run(
        [
            "-m",
            "publisher",
            "publish",
            *cluster.ns,
            "--channel",
            "batch",
            "--id",
            "P",
            "--file",
            str(path),
            "--spark",
            mode,
            "--json",
            "--no-progress",
            *extra,
        ],
        timeout_s,
    )


def check_delivery(cluster: Cluster, valid: set[str], order: dict) -> None:
    got = cluster.wait_for_records("batch", ("s1", "s2"), len(valid))
    seen = [r["id"] for recs in got.values() for r in recs]
    assert sorted(seen) == sorted(valid)
    for recs in got.values():
        for key, expected in order.items():
            mine = [r["id"] for r in recs if (r["publisher_id"], r["partition"]) == key]
            assert mine in ([], expected), key  # a block whole and in timestamp order


def test_publish_a_file_directly(cluster: Cluster) -> None:
    cluster.broker("batch")
    cluster.subscriber("batch", "s1")
    cluster.subscriber("batch", "s2")
    valid, order = write_batch(cluster.tmp / "batch.jsonl")
    result = publish_file(cluster, cluster.tmp / "batch.jsonl", "never")
    assert result.returncode == EXIT_PARTIAL, result.stderr
    figures = json.loads(result.stdout.splitlines()[-1])
    assert (figures["accepted"], figures["duplicates"]) == (40, 1)
    assert "1 invalid row was not published: line 42" in result.stdout
    check_delivery(cluster, valid, order)


@pytest.mark.spark
def test_publish_a_file_through_the_spark_plan(cluster: Cluster) -> None:
    cluster.broker("batch")
    cluster.subscriber("batch", "s1")
    cluster.subscriber("batch", "s2")
    valid, order = write_batch(cluster.tmp / "batch.jsonl")
    result = publish_file(cluster, cluster.tmp / "batch.jsonl", "always", timeout_s=180)
    assert result.returncode == EXIT_PARTIAL, result.stderr
    assert "plan: spark: 40 events in 6 blocks over 2 slots" in result.stdout
    assert "1 duplicates dropped, 1 rejected" in result.stdout
    figures = json.loads(result.stdout.splitlines()[-1])
    assert (figures["accepted"], figures["duplicates"]) == (40, 0)
    check_delivery(cluster, valid, order)


def test_spark_always_without_an_input_is_a_clear_error(cluster: Cluster) -> None:
    cluster.broker("batch")
    result = publish_file(cluster, cluster.tmp / "missing.jsonl", "never")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: input not found")
