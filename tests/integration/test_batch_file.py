"""Publishing a batch file: directly (--spark never) and through the Spark plan, which
publish the same events: a duplicate is what the channel calls one (the same publisher and
id by default, the same id on a channel with ids unique per channel)."""

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


Key = tuple[str, str]
"""An event's (publisher_id, id)."""


def write_batch(path: Path) -> tuple[set[Key], dict[tuple[str, int], list[str]]]:
    """A small batch out of timestamp order, with a duplicate, another publisher's event
    with an id already used (e6) and an invalid row. Returns the valid events' (publisher,
    id) and, per (publisher, partition), the ids in timestamp order."""
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
    rows.append(dict(rows[6], publisher_id="p1", payload="p1's own e6"))  # rows[6] is p0's
    rows.append({"id": "bad", "publisher_id": "not valid!", "timestamp": BASE_TS, "payload": ""})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    valid = [*rows[:40], rows[41]]
    order: dict[tuple[str, int], list[str]] = {}
    for r in sorted(valid, key=lambda r: (r["timestamp"], r["id"])):
        order.setdefault((r["publisher_id"], r["partition"]), []).append(r["id"])
    return {(r["publisher_id"], r["id"]) for r in valid}, order


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


def check_delivery(cluster: Cluster, valid: set[Key], order: dict) -> None:
    got = cluster.wait_for_records("batch", ("s1", "s2"), len(valid))
    seen = [(r["publisher_id"], r["id"]) for recs in got.values() for r in recs]
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
    assert (figures["accepted"], figures["duplicates"]) == (41, 1)
    assert "1 invalid row was not published: line 43" in result.stdout
    check_delivery(cluster, valid, order)


@pytest.mark.spark
def test_publish_a_file_through_the_spark_plan(cluster: Cluster) -> None:
    cluster.broker("batch")
    cluster.subscriber("batch", "s1")
    cluster.subscriber("batch", "s2")
    valid, order = write_batch(cluster.tmp / "batch.jsonl")
    result = publish_file(cluster, cluster.tmp / "batch.jsonl", "always", timeout_s=180)
    assert result.returncode == EXIT_PARTIAL, result.stderr
    assert "plan: spark: 41 events in 6 blocks over 2 slots" in result.stdout
    assert "1 duplicates dropped (same publisher_id and id), 1 rejected" in result.stdout
    figures = json.loads(result.stdout.splitlines()[-1])
    assert (figures["accepted"], figures["duplicates"]) == (41, 0)
    check_delivery(cluster, valid, order)  # the events --spark never publishes


@pytest.mark.spark
def test_a_plan_for_a_channel_with_ids_unique_per_channel_dedupes_by_id(
    cluster: Cluster,
) -> None:
    # Given a channel whose ids are unique per channel: p1's e6 is a duplicate of p0's
    cluster.broker("batch", extra=("--ids", "channel"))
    cluster.subscriber("batch", "s1")
    cluster.subscriber("batch", "s2")
    valid, order = write_batch(cluster.tmp / "batch.jsonl")
    valid.discard(("p1", "e6"))
    order[("p1", 0)].remove("e6")
    # When the file is published through a plan (the publisher learns the channel's scope)
    result = publish_file(cluster, cluster.tmp / "batch.jsonl", "always", timeout_s=180)
    # Then the plan drops it as the channel would, and says so; the rest is delivered
    assert result.returncode == EXIT_PARTIAL, result.stderr
    assert "2 duplicates dropped (same id, any publisher), 1 rejected" in result.stdout
    figures = json.loads(result.stdout.splitlines()[-1])
    assert (figures["accepted"], figures["duplicates"]) == (40, 0)
    check_delivery(cluster, valid, order)


def test_spark_always_without_an_input_is_a_clear_error(cluster: Cluster) -> None:
    cluster.broker("batch")
    result = publish_file(cluster, cluster.tmp / "missing.jsonl", "never")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: input not found")
