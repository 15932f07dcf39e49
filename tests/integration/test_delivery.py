"""Scenarios A1-A4, A6-A8 (docs/scenarios.md): competing consumers with real broker and
subscriber processes."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from channel_server.errors import InvalidEvent
from tests.integration.conftest import channel_stats, publisher_for
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration


def by_partition(records: list[dict[str, Any]]) -> dict[Any, list[str]]:
    parts: dict[Any, list[str]] = defaultdict(list)
    for rec in records:
        parts[rec["partition"]].append(rec["id"])
    return dict(parts)


def publish_partitioned(
    cluster: Cluster, channel: str, count: int, partitions: int, pub_id: str = "PUB"
) -> dict:
    with publisher_for(cluster, channel, pub_id) as pub:
        events = [pub.event(f"e{i}", partition=i % partitions) for i in range(count)]
        return pub.publish(events)


def test_a1_events_wait_for_the_first_subscriber(cluster: Cluster) -> None:
    cluster.broker("a1")
    summary = publish_partitioned(cluster, "a1", 10, 1)
    assert summary["accepted"] == 10
    stats = channel_stats(cluster, "a1")
    assert stats["unacked"] == 10
    assert stats["acked"] == 0
    assert stats["groups"]["default"]["backlog"] == 10

    cluster.subscriber("a1", "s1")
    got = cluster.wait_for_records("a1", ("s1",), 10)["s1"]
    assert [r["id"] for r in got] == [f"PUB-{i}" for i in range(1, 11)]
    wait_until(lambda: channel_stats(cluster, "a1")["unacked"] == 0, what="all acked")


def test_a2_each_partition_goes_whole_to_one_subscriber(cluster: Cluster) -> None:
    cluster.broker("a2")
    cluster.subscriber("a2", "s1")
    cluster.subscriber("a2", "s2")
    publish_partitioned(cluster, "a2", 20, 2)
    got = cluster.wait_for_records("a2", ("s1", "s2"), 20)
    parts = {sub: by_partition(recs) for sub, recs in got.items()}
    assert all(len(p) == 1 for p in parts.values()), parts
    assert {next(iter(p)) for p in parts.values()} == {0, 1}
    assert all(len(ids) == 10 for p in parts.values() for ids in p.values())


def test_a3_a_thousand_events_delivered_once_within_a_second(cluster: Cluster) -> None:
    cluster.broker("a3")
    cluster.subscriber("a3", "s1", "--quiet")
    cluster.subscriber("a3", "s2", "--quiet")
    publish_partitioned(cluster, "a3", 1000, 2)
    published = time.time()
    got = cluster.wait_for_records("a3", ("s1", "s2"), 1000)
    # each record is written as its event is processed, on the subscriber's clock (this
    # test's polls of the files come later)
    last = max(r["at"] for recs in got.values() for r in recs)
    assert last - published <= 1.0, f"the last event processed {last - published:.2f} s after"
    ids = [r["id"] for recs in got.values() for r in recs]
    assert len(ids) == 1000
    assert len(set(ids)) == 1000
    for recs in got.values():
        parts = by_partition(recs)
        assert len(parts) == 1
        ((partition, part_ids),) = parts.items()
        seqs = [int(i.split("-")[1]) for i in part_ids]
        assert seqs == sorted(seqs)
        assert all((s - 1) % 2 == partition for s in seqs)


def test_a4_capacity_refuses_with_queue_full_and_loses_nothing(cluster: Cluster) -> None:
    cluster.broker("a4", extra=("--capacity", "1000"))
    result = cluster.run(
        [
            "-m",
            "publisher",
            "publish",
            *cluster.ns,
            "--channel",
            "a4",
            "--id",
            "PUB",
            "--count",
            "10000",
            "--batch-size",
            "100",
            "--json",
        ]
    )
    assert result.returncode == 4, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["accepted"] == 1000
    assert figures["refused"] == 9000
    assert figures["accepted"] + figures["refused"] + figures["duplicates"] == 10000
    assert "QueueFull" in result.stdout
    assert channel_stats(cluster, "a4")["unacked"] == 1000


def test_a6_partition_queues_are_created_filled_and_emptied(cluster: Cluster) -> None:
    cluster.broker("a6", extra=("--partition-idle", "0.5"))
    assert channel_stats(cluster, "a6")["groups"]["default"]["partitions"] == []
    publish_partitioned(cluster, "a6", 10, 2)
    parts = channel_stats(cluster, "a6")["groups"]["default"]["partitions"]
    assert sorted((p["partition"], p["pending"], p["owner"]) for p in parts) == [
        (0, 5, None),
        (1, 5, None),
    ]
    cluster.subscriber("a6", "s1")
    cluster.subscriber("a6", "s2")
    cluster.wait_for_records("a6", ("s1", "s2"), 10)

    def emptied() -> bool:
        parts = channel_stats(cluster, "a6")["groups"]["default"]["partitions"]
        return all(p["pending"] == 0 and p["in_flight"] == 0 for p in parts)

    wait_until(emptied, what="partition queues emptied")
    wait_until(
        lambda: channel_stats(cluster, "a6")["groups"]["default"]["partitions"] == [],
        what="idle partition queues dropped",
    )


def start_five(cluster: Cluster, channel: str) -> tuple[str, ...]:
    subs = tuple(f"s{i}" for i in range(1, 6))
    for sub in subs:
        cluster.subscriber(channel, sub)
    return subs


def assert_one_partition_each(got: dict[str, list[dict[str, Any]]]) -> None:
    assert all(len(recs) == 1 for recs in got.values()), got
    assert sorted(recs[0]["partition"] for recs in got.values()) == [0, 1, 2, 3, 4]


def test_a7_five_subscribers_five_partitions(cluster: Cluster) -> None:
    cluster.broker("a7")
    subs = start_five(cluster, "a7")
    publish_partitioned(cluster, "a7", 5, 5)
    assert_one_partition_each(cluster.wait_for_records("a7", subs, 5))


def test_a8_two_channels_five_subscribers_each_at_once(cluster: Cluster) -> None:
    cluster.broker("a8x", "a8y")
    subs = {ch: start_five(cluster, ch) for ch in ("a8x", "a8y")}
    # One publisher id each: two Publishers of one id share a state file (and a sequence)
    threads = [
        threading.Thread(target=publish_partitioned, args=(cluster, ch, 5, 5, f"PUB-{ch}"))
        for ch in subs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for channel, names in subs.items():
        assert_one_partition_each(cluster.wait_for_records(channel, names, 5))


def test_invalid_batch_is_rejected_whole_with_the_field_named(cluster: Cluster) -> None:
    cluster.broker("inv")
    with publisher_for(cluster, "inv") as pub:
        good = pub.event("ok")
        bad = dict(pub.event("bad"), timestamp="yesterday")
        with pytest.raises(InvalidEvent) as caught:
            pub.publish([good, bad])
    assert caught.value.field == "timestamp"
    assert caught.value.index == 1
    assert channel_stats(cluster, "inv")["accepted"] == 0
