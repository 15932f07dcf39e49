"""``status`` counts across a broker restart (issue 14, item 9): a channel over the SQLite
store is restored as a broker restores it (fake clock, a pull member, no sockets), and
its ``accepted`` / ``acked`` / ``unacked`` figures keep agreeing. Before, a restart reset
``accepted`` while the acks of the restored events still counted ("100 accepted, 101
acknowledged")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from channel_server.channel import EventChannel
from channel_server.config import ChannelConfig
from channel_server.dispatch import DispatchPool
from channel_server.events import event_uid
from channel_server.store.sqlite import SQLiteStore
from tests.inprocess.conftest import FakeClock


@contextmanager
def broker_life(data: Path, pool: DispatchPool, clock: FakeClock) -> Iterator[EventChannel]:
    """One life of a channel over the store in ``data``, restored as a broker does."""
    store = SQLiteStore(data)
    channel = EventChannel("c", ChannelConfig(), store, pool, clock=clock)
    try:
        channel.restore()
        yield channel
    finally:
        channel.close()
        store.close()


def raw(event_id: str, ts: float) -> dict[str, Any]:
    return {"id": event_id, "publisher_id": "pub", "partition": 0, "timestamp": ts}


def counts(channel: EventChannel) -> tuple[int, int, int]:
    stats = channel.stats()
    return stats["accepted"], stats["acked"], stats["unacked"]


def drain(channel: EventChannel, member: str, last: str | None = None) -> list[str]:
    """Get and acknowledge until nothing is left; the uids got, in order."""
    got = []
    while (reply := channel.get(member, last))["status"] == "message":
        last = event_uid(reply["event"]["publisher_id"], reply["event"]["id"])
        got.append(last)
    return got


def test_acknowledged_never_exceeds_accepted_after_a_restart(
    tmp_path: Path, pool: DispatchPool, clock: FakeClock
) -> None:
    data = tmp_path / "data"
    # Given a life that accepted three events and acknowledged one (the second in hand)
    with broker_life(data, pool, clock) as channel:
        channel.subscribe("p1")
        assert channel.publish([raw(f"e{i}", float(i)) for i in range(3)])["accepted"] == 3
        assert channel.get("p1")["event"]["id"] == "e0"
        assert channel.get("p1", "pub/e0")["event"]["id"] == "e1"
        assert counts(channel) == (3, 1, 2)
    # When the broker restarts, and the restored events and a new one are acknowledged
    with broker_life(data, pool, clock) as channel:
        assert counts(channel) == (2, 0, 2)
        assert channel.publish([raw("e3", 3.0)])["accepted"] == 1
        assert drain(channel, "p1") == ["pub/e1", "pub/e2", "pub/e3"]
        # Then acknowledged never outnumbers accepted: both count this life's events
        assert counts(channel) == (3, 3, 0)
