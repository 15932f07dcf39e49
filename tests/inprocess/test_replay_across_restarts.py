"""A replayed dead letter on a channel of several groups, across broker restarts (session
34's Jepsen probe): it goes again to the groups it died in, and only to them, whether it
died in one group or in several, and whether another group still held it or none did.

Each life is a real EventChannel restored from the same store, as a broker restores it
(fake clock, pull members, no sockets); the store is seeded with the history, since a
pull member cannot fail an event."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from channel_server.channel import EventChannel
from channel_server.config import ChannelConfig
from channel_server.dispatch import DispatchPool
from channel_server.events import Event
from channel_server.store import MemoryStore, Store
from channel_server.store.base import ChannelRecord, DeadLetterRecord
from channel_server.store.sqlite import SQLiteStore
from tests.inprocess.conftest import FakeClock

GROUPS = {"a": "default", "b": "B"}
"""Pull member -> its group."""
E0 = Event("e0", "pub", 0, 1.0, "payload", 0, size=12)


class Lives:
    """The lives of one channel over one store (SQLite: reopened each life; memory: the
    same instance, as a store that outlives the broker)."""

    def __init__(self, kind: str, tmp_path: Path, pool: DispatchPool) -> None:
        self.kind, self.data, self.pool = kind, tmp_path / "data", pool
        self.memory = MemoryStore()

    def store(self) -> Store:
        return SQLiteStore(self.data) if self.kind == "sqlite" else self.memory

    @contextmanager
    def life(self) -> Iterator[EventChannel]:
        store = self.store()
        channel = EventChannel("c", ChannelConfig(), store, self.pool, clock=FakeClock())
        try:
            channel.restore()
            for member, group in GROUPS.items():
                channel.subscribe(member, None, group)
            yield channel
        finally:
            channel.close()
            if self.kind == "sqlite":
                store.close()

    def seed(self, dead_in: tuple[str, ...], held_by: tuple[str, ...] = ()) -> None:
        """e0 was published to both groups; it died in ``dead_in``, ``held_by`` still owe
        it, and the other groups acknowledged it (no group holding it: its row is gone)."""
        store = self.store()
        store.save_channel(ChannelRecord("c", "queue"))
        for group in GROUPS.values():
            store.save_group("c", group, 0)
        store.append("c", [E0], 1, 0.0)
        for group in set(GROUPS.values()) - set(dead_in) - set(held_by):
            store.ack("c", group, [0])
        if not held_by:
            store.delete("c", [0])
        store.add_dead_letters("c", [DeadLetterRecord(g, E0, "boom") for g in dead_in])
        store.write_deferred_now()
        if self.kind == "sqlite":
            store.close()


def got(channel: EventChannel, member: str) -> list[str]:
    """Get and acknowledge until nothing is left; the ids got."""
    ids, last = [], None
    while (reply := channel.get(member, last, GROUPS[member]))["status"] == "message":
        ids.append(reply["event"]["id"])
        last = f"pub/{reply['event']['id']}"
    return ids


@pytest.fixture(params=["sqlite", "memory"])
def lives(request: pytest.FixtureRequest, tmp_path: Path, pool: DispatchPool) -> Lives:
    return Lives(request.param, tmp_path, pool)


def test_an_event_dead_in_two_groups_is_replayed_to_both_and_kept_for_the_slower(
    lives: Lives,
) -> None:
    """It was accepted twice by its replay and deleted from the store by the first
    group's ack: after a restart the second group never got it."""
    lives.seed(dead_in=("default", "B"))
    with lives.life() as channel:
        assert channel.replay_dead_letters() == 2
        assert channel.stats()["unacked"] == 1  # one event, held by two groups
        assert got(channel, "a") == ["e0"]
    with lives.life() as channel:
        assert got(channel, "b") == ["e0"]
        assert got(channel, "a") == []
        assert (channel.stats()["unacked"], channel.stats()["dead_letters"]) == (0, 0)


def test_a_replay_goes_to_the_group_it_died_in_only_after_a_restart(lives: Lives) -> None:
    """Its row went with every group's acks: stored again without them, a restart gave
    it to the groups that had acknowledged it too."""
    lives.seed(dead_in=("default",))
    with lives.life() as channel:
        assert channel.replay_dead_letters() == 1
    with lives.life() as channel:
        assert got(channel, "b") == []
        assert got(channel, "a") == ["e0"]


def test_a_replay_beside_a_group_still_holding_it_after_a_restart(lives: Lives) -> None:
    """After a restart one holder leaves no count to add the replay to, so the replay
    stored it again as if no group held it, and the replayed group's ack deleted it."""
    lives.seed(dead_in=("default",), held_by=("B",))
    with lives.life() as channel:
        assert channel.replay_dead_letters() == 1
        assert channel.stats()["unacked"] == 1
        assert got(channel, "a") == ["e0"]
    with lives.life() as channel:
        assert got(channel, "b") == ["e0"]
        assert got(channel, "a") == []
