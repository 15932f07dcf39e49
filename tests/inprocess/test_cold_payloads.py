"""A channel over the SQLite store with no room for payloads in memory: every queued event
is cold, and what leaves it (gets, a restart's backlog, a rebuild) has its payload, read
back from the real store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from channel_server.channel import EventChannel
from channel_server.core.spill import COLD, cold_count
from channel_server.events import event_uid
from channel_server.store import MemoryStore
from channel_server.store.sqlite import SQLiteStore
from tests.inprocess.conftest import ChannelFactory, FakeClock

PAYLOADS = ["text", {"k": [1, 2.5, None]}, b"\x00\xffbytes", None, 7]


def published(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"e{i}",
            "publisher_id": "pub",
            "partition": 0,
            "timestamp": float(i),
            "payload": PAYLOADS[i % len(PAYLOADS)],
        }
        for i in range(count)
    ]


def drain(channel: EventChannel, subscriber: str) -> list[tuple[str, Any]]:
    got, last = [], None
    while (reply := channel.get(subscriber, last))["status"] == "message":
        ev = reply["event"]
        got.append((ev["id"], ev["payload"]))
        last = event_uid(ev["publisher_id"], ev["id"])
    return got


def channel_get(channel: EventChannel, subscriber: str) -> tuple[str, Any]:
    ev = channel.get(subscriber)["event"]
    return ev["id"], ev["payload"]


def pending(channel: EventChannel) -> list[Any]:
    return [
        ev
        for g in channel.core.groups.values()
        for pq in g.partitions.values()
        for ev in pq.pending
    ]


@pytest.fixture
def open_channel(make_channel: ChannelFactory, tmp_path: Path, clock: FakeClock):
    """Opens the channel over its SQLite store (closing the one opened before: a restart)."""
    stores: list[SQLiteStore] = []

    def open_it() -> EventChannel:
        if stores:
            stores[-1].close()
        stores.append(SQLiteStore(tmp_path / "data"))
        return make_channel(store=stores[-1], clock=clock, payload_memory_bytes=0)

    yield open_it
    stores[-1].close()


def test_every_event_is_queued_cold_and_got_with_its_payload(open_channel) -> None:
    channel = open_channel()
    channel.subscribe("p1")
    channel.publish(published(10))
    assert cold_count(pending(channel)) == 10
    assert drain(channel, "p1") == [(f"e{i}", PAYLOADS[i % 5]) for i in range(10)]
    stats = channel.stats()
    assert (stats["queued_cold"], stats["read_back"], stats["unacked"]) == (10, 10, 0)


def test_a_restart_restores_a_cold_backlog_and_delivers_its_payloads(open_channel) -> None:
    first = open_channel()
    first.subscribe("p1")
    first.publish(published(6))
    assert channel_get(first, "p1") == ("e0", PAYLOADS[0])  # held, not acknowledged
    first.close()
    again = open_channel()
    assert again.restore() == 6
    assert cold_count(pending(again)) == 6
    assert drain(again, "p1") == [(f"e{i}", PAYLOADS[i % 5]) for i in range(6)]


def test_rebuilt_queues_are_cold_and_still_deliver_their_payloads(open_channel) -> None:
    channel = open_channel()
    channel.subscribe("p1")
    channel.publish(published(5))
    assert channel.kill_queues() == 5
    channel.housekeep()  # the invariant finds the loss and rebuilds from the store
    assert cold_count(pending(channel)) == 5
    assert drain(channel, "p1") == [(f"e{i}", PAYLOADS[i]) for i in range(5)]


def test_the_memory_store_keeps_every_payload(make_channel: ChannelFactory) -> None:
    channel = make_channel(store=MemoryStore(), payload_memory_bytes=0)
    channel.subscribe("p1")
    channel.publish(published(3))
    assert COLD not in [ev.payload for ev in pending(channel)]
    assert channel.stats()["queued_cold"] == 0
