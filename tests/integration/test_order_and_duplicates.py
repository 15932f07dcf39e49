"""Scenarios A16-A19 (docs/scenarios.md): per-partition timestamp order and the delivered-ID
set."""

from __future__ import annotations

import random

import pytest

from tests.integration.conftest import channel_stats, publisher_for
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration
BASE_TS = 1_700_000_000.0
MARKER_SEQ = 100
MARKER_ID = f"PUB-{MARKER_SEQ}"


def ten_events(pub, seed: int = 7) -> list[dict]:
    """10 events over 2 partitions with timestamps in shuffled order."""
    stamps = [BASE_TS + i for i in range(10)]
    random.Random(seed).shuffle(stamps)
    return [pub.event(f"e{i}", partition=i % 2, timestamp=ts) for i, ts in enumerate(stamps)]


def test_a16_each_partition_processed_in_timestamp_order(cluster: Cluster) -> None:
    cluster.broker("a16")
    cluster.subscriber("a16", "s1")
    cluster.subscriber("a16", "s2")
    with publisher_for(cluster, "a16") as pub:
        events = ten_events(pub)
        assert [e["timestamp"] for e in events] != sorted(e["timestamp"] for e in events)
        pub.publish(events)
    got = cluster.wait_for_records("a16", ("s1", "s2"), 10)
    for recs in got.values():
        assert len({r["partition"] for r in recs}) == 1
        stamps = [r["timestamp"] for r in recs]
        assert stamps == sorted(stamps)
        assert len(stamps) == 5


def publish_marker_and_wait(cluster: Cluster, channel: str, subs: tuple[str, ...], total: int):
    """A fresh event after the round under test, in the same (publisher, partition) and
    later in time: once it is processed, anything the round would have delivered to that
    partition has been delivered too (per-partition order)."""
    with publisher_for(cluster, channel, next_seq=MARKER_SEQ) as pub:
        marker = pub.event("marker", partition=0, timestamp=BASE_TS + 100)
        assert pub.publish([marker])["accepted"] == 1
    return cluster.wait_for_records(channel, subs, total)


def first_round(cluster: Cluster, channel: str) -> list[dict]:
    cluster.broker(channel)
    cluster.subscriber(channel, "s1")
    cluster.subscriber(channel, "s2")
    with publisher_for(cluster, channel) as pub:
        events = ten_events(pub)
        assert pub.publish(events)["accepted"] == 10
    cluster.wait_for_records(channel, ("s1", "s2"), 10)
    wait_until(lambda: channel_stats(cluster, channel)["unacked"] == 0, what="round acked")
    return events


def all_ids(cluster: Cluster, channel: str) -> list[str]:
    return [r["id"] for recs in cluster.records(channel, "s1", "s2").values() for r in recs]


def test_a17_same_events_twice_are_all_duplicates(cluster: Cluster) -> None:
    events = first_round(cluster, "a17")
    with publisher_for(cluster, "a17") as pub:
        summary = pub.publish(events)
    assert summary["accepted"] == 0
    assert sorted(summary["duplicates"]) == sorted(e["id"] for e in events)
    publish_marker_and_wait(cluster, "a17", ("s1", "s2"), 11)
    ids = all_ids(cluster, "a17")
    assert len(ids) == 11
    assert len(set(ids)) == 11


def test_a18_only_the_new_event_is_delivered(cluster: Cluster) -> None:
    events = first_round(cluster, "a18")
    with publisher_for(cluster, "a18", next_seq=11) as pub:
        new = pub.event("new", partition=1)
        summary = pub.publish([*events, new])
    assert summary["accepted"] == 1
    assert len(summary["duplicates"]) == 10
    publish_marker_and_wait(cluster, "a18", ("s1", "s2"), 12)
    ids = all_ids(cluster, "a18")
    assert sorted(ids) == sorted([e["id"] for e in events] + [new["id"], MARKER_ID])


def test_a19_duplicates_survive_resubscription(cluster: Cluster) -> None:
    events = first_round(cluster, "a19")
    for proc in list(cluster.procs[1:]):
        assert proc.terminate() == 0
    wait_until(
        lambda: channel_stats(cluster, "a19")["groups"]["default"]["members"] == [],
        what="both unsubscribed",
    )
    cluster.subscriber("a19", "s1")
    cluster.subscriber("a19", "s2")
    with publisher_for(cluster, "a19") as pub:
        summary = pub.publish(events)
    assert summary["accepted"] == 0
    assert len(summary["duplicates"]) == 10
    publish_marker_and_wait(cluster, "a19", ("s1", "s2"), 11)
    assert len(all_ids(cluster, "a19")) == 11
