"""The store contract (DESIGN §7): the same tests against every store implementation."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from channel_server.core.spill import COLD
from channel_server.events import Event, IdScope, validate_batch
from channel_server.store import MemoryStore, Store, pg_reads, sqlite_reads
from channel_server.store.base import (
    SESSIONS_PER_LIFE,
    ChannelRecord,
    DeadLetterRecord,
    MemberRecord,
)
from channel_server.store.postgres import PostgresStore
from channel_server.store.sqlite import SQLiteStore

Opener = Callable[[], Store]
LEASE_S = 60.0
"""The postgresql store's leases here: longer than any test."""


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the store under test; for a durable store, opening again reads the same data
    (a PostgresStore of the same broker id, which takes its channels' leases again)."""
    opened: list[Store] = []
    memory = MemoryStore()
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgresql" else ""

    def open_store() -> Store:
        if request.param == "memory":
            return memory
        if opened:
            opened[-1].close()
        if request.param == "sqlite":
            opened.append(SQLiteStore(tmp_path / "data"))
            return opened[-1]
        store = PostgresStore(dsn, "broker-1")
        for lease in store.leases():
            assert store.acquire(lease.channel, LEASE_S) is not None
        opened.append(store)
        return store

    yield open_store
    if opened:
        opened[-1].close()


@pytest.fixture
def store(opener: Opener) -> Store:
    return opener()


def ev(offset: int, ts: float, payload: object = "p", partition: object = 0) -> Event:
    return Event(f"id-{offset}", "pub", partition, ts, payload, offset)


def test_channels_are_saved_once_in_creation_order(store: Store) -> None:
    store.save_channel(ChannelRecord("b", "queue"))
    store.save_channel(ChannelRecord("a", "topic", IdScope.CHANNEL.value))
    store.save_channel(ChannelRecord("b", "topic", IdScope.CHANNEL.value))
    assert store.channels() == [
        ChannelRecord("b", "queue", "publisher"),
        ChannelRecord("a", "topic", "channel"),
    ]


def test_events_come_back_in_timestamp_offset_order_with_their_types(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    events = [
        ev(0, 3.0, b"\x00bytes"),
        ev(1, 1.0, {"k": [1, 2.5, None, True]}, partition="7"),
        ev(2, 1.0, None, partition=-5),
        ev(3, 2.0, "text", partition="eu"),
    ]
    store.append("c", events, next_offset=4, accepted_at=100.0)
    snap = store.load("c")
    assert [e.offset for e in snap.events] == [1, 2, 3, 0]
    back = {e.offset: e for e in snap.events}
    for original in events:
        restored = back[original.offset]
        assert (restored.id, restored.publisher_id, restored.timestamp) == (
            original.id,
            original.publisher_id,
            original.timestamp,
        )
        assert restored.payload == original.payload
        assert restored.partition == original.partition
        assert type(restored.partition) is type(original.partition)
    assert snap.next_offset == 4
    assert store.count("c") == 4


def test_ack_is_remembered_and_delete_forgets_events_and_acks(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    store.append("c", [ev(i, float(i)) for i in range(4)], 4, 0.0)
    store.ack("c", "g1", [0, 1])
    assert store.load("c").acks == {"g1": {0, 1}}
    store.delete("c", [0, 2])
    snap = store.load("c")
    assert [e.offset for e in snap.events] == [1, 3]
    assert snap.acks == {"g1": {1}}
    assert store.count("c") == 2


def test_channels_do_not_see_each_other(store: Store) -> None:
    store.save_channel(ChannelRecord("x", "queue"))
    store.save_channel(ChannelRecord("y", "queue"))
    store.append("x", [ev(0, 1.0)], 1, 0.0)
    store.append("y", [ev(0, 2.0), ev(1, 3.0)], 2, 0.0)
    store.delete("x", [0])
    assert store.count("x") == 0
    assert [e.offset for e in store.load("y").events] == [0, 1]


def test_groups_keep_their_first_creation_offset(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    store.save_group("c", "default", 0)
    store.save_group("c", "late", 10)
    store.save_group("c", "late", 20)
    assert store.load("c").groups == {"default": 0, "late": 10}


def test_removing_a_group_forgets_its_acks_owners_and_dead_letters(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    store.append("c", [ev(0, 1.0), ev(1, 2.0)], 2, 0.0)
    store.save_group("c", "g", 0)
    store.ack("c", "g", [0])
    store.save_owners("c", "g", {("pub", 0): "s1"})
    store.add_dead_letters("c", [DeadLetterRecord("g", ev(1, 2.0), "boom")])
    store.remove_group("c", "g")
    snap = store.load("c")
    assert (snap.groups, snap.acks, snap.dead_letters) == ({}, {}, [])
    assert snap.owners.get("g", {}) == {}
    assert len(snap.events) == 2


def test_members_are_saved_replaced_and_removed(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    store.save_member(MemberRecord("c", "g", "s1", "PYRO:a@127.0.0.1:1", 10))
    store.save_member(MemberRecord("c", "g", "s1", "PYRO:b@127.0.0.1:2", 5))
    store.save_member(MemberRecord("c", "g", "s2", "PYRO:c@127.0.0.1:3", 1))
    assert store.load("c").members == [
        MemberRecord("c", "g", "s1", "PYRO:b@127.0.0.1:2", 5),
        MemberRecord("c", "g", "s2", "PYRO:c@127.0.0.1:3", 1),
    ]
    store.remove_member("c", "g", "s1")
    assert [m.member_id for m in store.load("c").members] == ["s2"]


def test_owners_follow_the_changes(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    store.save_owners("c", "g", {("pub", 0): "s1", ("pub", "eu"): "s2"})
    store.save_owners("c", "g", {("pub", 0): None, ("pub", "eu"): "s3"})
    assert store.load("c").owners == {"g": {("pub", "eu"): "s3"}}


def test_owners_of_many_partitions_at_once_are_all_kept(store: Store) -> None:
    """A publish with a new key per event gives hundreds of partitions their first owner
    at once (the SQLite store writes them many rows per statement): each is kept, a
    later change replaces its row, and string and integer partitions stay apart."""
    store.save_channel(ChannelRecord("c", "queue"))
    first = {("pub", i): f"s{i % 3}" for i in range(450)} | {("pub", "7"): "s9"}
    store.save_owners("c", "g", first)
    moved = {("pub", i): "s4" for i in range(0, 450, 50)} | {("pub", 1): None}
    store.save_owners("c", "g", moved)
    expected = {key: owner for key, owner in (first | moved).items() if owner is not None}
    assert store.load("c").owners == {"g": expected}


def test_dead_letters_keep_a_full_copy_until_replayed(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    poison = ev(5, 1.0, {"bad": True}, partition="p")
    store.append("c", [poison], 6, 0.0)
    store.add_dead_letters("c", [DeadLetterRecord("g", poison, "ValueError: bad")])
    store.delete("c", [5])
    (letter,) = store.load("c").dead_letters
    assert (letter.group, letter.error, letter.event.id) == ("g", "ValueError: bad", "id-5")
    assert letter.event.payload == {"bad": True}
    store.reinsert("c", [letter.event], accepted_at=9.0)
    store.remove_dead_letters("c", "g", [5])
    snap = store.load("c")
    assert snap.dead_letters == []
    assert [e.id for e in snap.events] == ["id-5"]
    if store.durable:  # its id was kept when it was deleted, and it is queued again: once
        assert [i for _, i, _ in snap.delivered].count("id-5") == 1


def test_a_durable_store_reads_back_everything_after_reopening(opener: Opener) -> None:
    store = opener()
    if not store.durable:  # nothing outlives it: it keeps no delivered window either
        store.append("c", [ev(0, 1.0)], 1, accepted_at=50.0)
        assert store.load("c").delivered == []
        return
    store.save_channel(ChannelRecord("c", "queue"))
    store.save_channel(ChannelRecord("w", "topic", IdScope.CHANNEL.value))
    store.append("c", [ev(0, 1.0), ev(1, 2.0)], 2, accepted_at=50.0)
    store.append("c", [ev(2, 3.0)], 3, accepted_at=60.0)
    store.trim_delivered("c", 1)
    store.save_member(MemberRecord("c", "default", "s1", "PYRO:x@127.0.0.1:9", 100))
    reopened = opener()
    snap = reopened.load("c")
    assert reopened.channels() == [
        ChannelRecord("c", "queue", "publisher"),
        ChannelRecord("w", "topic", "channel"),
    ]
    assert [e.offset for e in snap.events] == [0, 1, 2]
    assert snap.delivered == [("pub", "id-1", 50.0), ("pub", "id-2", 60.0)]
    assert snap.next_offset == 3
    assert [m.member_id for m in snap.members] == ["s1"]


def test_each_life_of_a_channel_claims_sessions_past_the_earlier_ones_whatever_the_clock(
    opener: Opener,
) -> None:
    store = opener()
    store.save_channel(ChannelRecord("c", "queue"))
    first = store.claim_sessions("c", 5_000)
    assert first == 5_000  # the clock's seed, the first time
    restarted = opener()  # a restart whose clock was set back
    second = restarted.claim_sessions("c", 1_000)
    assert second == first + SESSIONS_PER_LIFE
    ahead = second + 10 * SESSIONS_PER_LIFE  # a clock that moved on: the clock again
    assert restarted.claim_sessions("c", ahead) == ahead
    assert restarted.claim_sessions("other", 7) == 7  # each channel has its own


def test_deferred_acks_and_deletes_are_seen_by_every_reader(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    store.append("c", [ev(0, 1.0), ev(1, 2.0), ev(2, 3.0)], 3, 0.0)
    store.ack("c", "g", [0, 2])
    store.delete("c", [0, 1])
    assert store.count("c") == 1
    snap = store.load("c")
    assert [e.offset for e in snap.events] == [2]
    assert snap.acks.get("g") == {2}


def test_the_next_offset_outlives_every_event_and_id(opener: Opener) -> None:
    store = opener()
    store.save_channel(ChannelRecord("c", "queue"))  # before anything is written
    store.append("c", [ev(0, 1.0), ev(1, 2.0)], 2, 0.0)
    store.append("c", [ev(2, 3.0)], 7, 0.0)  # offsets 3-6 went to refused events
    store.delete("c", [0, 1, 2])
    store.trim_delivered("c", 3)
    assert opener().load("c").next_offset == 7
    store = opener()
    store.append("c", [ev(7, 4.0)], 8, 0.0)  # no gap: the next offset follows the event
    store.delete("c", [7])
    assert opener().load("c").next_offset == 8
    store = opener()
    store.trim_delivered("c", 1)
    assert opener().load("c").next_offset == 8


def test_the_window_trims_the_oldest_ids_acknowledged_or_not(opener: Opener) -> None:
    store = opener()
    store.save_channel(ChannelRecord("c", "queue"))  # before anything is written
    if not store.durable:  # it keeps no window
        return
    store.append("c", [ev(i, float(i)) for i in range(5)], 5, accepted_at=1.0)
    store.delete("c", [0, 2])  # acknowledged: the ids stay in the window
    store.trim_delivered("c", 2)  # the two oldest: id-0 (acknowledged), id-1 (still queued)
    snap = opener().load("c")
    assert [i for _, i, _ in snap.delivered] == ["id-2", "id-3", "id-4"]
    assert [e.offset for e in snap.events] == [1, 3, 4]
    reopened = opener()
    reopened.trim_delivered("c", 5)  # more than there are
    snap = opener().load("c")
    assert (snap.delivered, snap.next_offset) == ([], 5)


def test_the_window_keeps_the_publisher_of_every_id_acknowledged_or_not(opener: Opener) -> None:
    store = opener()
    store.save_channel(ChannelRecord("c", "queue"))  # before anything is written
    if not store.durable:  # it keeps no window
        return
    # Given two publishers' events with one id (a channel with ids unique per publisher)
    same_id = [Event("x", pub, 0, 1.0, "p", offset) for offset, pub in enumerate("AB")]
    store.append("c", same_id, 2, accepted_at=5.0)
    # When A's is acknowledged (deleted: its id moves to the delivered rows)
    store.delete("c", [0])
    # Then a restart reads both (publisher, id) pairs back, in order
    snap = opener().load("c")
    assert snap.delivered == [("A", "x", 5.0), ("B", "x", 5.0)]
    assert [e.uid for e in snap.events] == ["B/x"]


def test_the_count_follows_appends_deletes_and_replays(opener: Opener) -> None:
    store = opener()
    store.save_channel(ChannelRecord("c", "queue"))  # before anything is written
    assert store.count("c") == 0
    store.append("c", [ev(i, float(i)) for i in range(5)], 5, 0.0)
    assert store.count("c") == 5
    store.delete("c", [1, 3])
    assert store.count("c") == 3
    store.load("c")  # a durable store writes its deferred deletes first
    assert store.count("c") == 3
    store.append("c", [ev(5, 5.0)], 6, 0.0)
    store.reinsert("c", [ev(1, 1.0)], 1.0)
    store.reinsert("c", [ev(1, 1.0)], 2.0)  # the same event again: no new row
    assert store.count("c") == 5
    assert opener().count("c") == 5


def test_events_come_back_with_the_sizes_validation_gave_them(opener: Opener) -> None:
    # The bytes a channel queues are restored from what a store reads back: every copy
    # of an event must count as many bytes as the one that was published.
    store = opener()
    store.save_channel(ChannelRecord("c", "queue"))
    payloads = ["ascii", "é✓ ünï", b"\x00\xff", bytearray(b"ab"), None, 7, 2.5, True]
    payloads += [{"k": [1, "v", {"n": None}]}, [1, 2**63], ("tuple", 1)]
    raw = [
        {"id": f"e-{i}", "publisher_id": "pub", "timestamp": 1.0, "payload": p}
        for i, p in enumerate(payloads)
    ]
    events = validate_batch(raw, first_offset=0)
    store.append("c", events, len(events), 1.0)
    store.add_dead_letters("c", [DeadLetterRecord("default", events[2], "boom")])
    snap = opener().load("c")
    assert {ev.id: ev.size for ev in snap.events} == {ev.id: ev.size for ev in events}
    assert [d.event.size for d in snap.dead_letters] == [events[2].size]


def test_payloads_are_read_back_by_offset_with_their_types(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    store.save_channel(ChannelRecord("other", "queue"))
    kinds = ["text", b"\x00bytes", {"k": [1, 2.5, None]}, None, 7]
    store.append("c", [ev(i, float(i), p) for i, p in enumerate(kinds)], 5, 100.0)
    store.append("other", [ev(0, 1.0, "not c's")], 1, 100.0)
    assert store.payloads("c", [4, 0, 2, 1, 3]) == dict(enumerate(kinds))
    assert store.payloads("c", [0, 99]) == {0: "text"}  # an offset it does not hold: absent
    assert store.payloads("c", []) == {}


def test_a_load_with_a_payload_budget_gives_the_later_events_cold(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_reads, "PAGE_ROWS", 2)  # pages end between events
    monkeypatch.setattr(pg_reads, "PAGE_ROWS", 2)
    store.save_channel(ChannelRecord("c", "queue"))
    events = [ev(i, 10.0 - i, f"payload-{i}") for i in range(5)]  # delivered newest first
    store.append("c", events, 5, 100.0)
    budget = 2 * len("id-0payload-0")  # the two accepted first keep their payloads
    snap = store.load("c", payload_budget=budget)
    assert [e.offset for e in snap.events] == [4, 3, 2, 1, 0]
    kept = {e.offset: e.payload for e in snap.events}
    if store.durable:
        assert kept == {0: "payload-0", 1: "payload-1", 2: COLD, 3: COLD, 4: COLD}
        assert {e.size for e in snap.events} == {budget // 2}  # counted cold or not
        assert [i for _, i, _ in snap.delivered] == [f"id-{i}" for i in range(5)]
    else:  # the memory store keeps every payload anyway
        assert kept == {i: f"payload-{i}" for i in range(5)}
    assert {e.offset: e.payload for e in store.load("c").events} == {
        i: f"payload-{i}" for i in range(5)
    }


def test_events_read_back_share_their_publisher_id_and_string_partition(store: Store) -> None:
    store.save_channel(ChannelRecord("c", "queue"))
    store.append("c", [ev(i, float(i), partition="eu-west") for i in range(3)], 3, 0.0)
    events = store.load("c").events
    assert len({id(e.publisher_id) for e in events}) == 1  # one string, not one per event
    assert len({id(e.partition) for e in events}) == 1


CRASH_AFTER_MOVE = """
import os, sys
from channel_server.events import Event
from channel_server.store.base import ChannelRecord
from channel_server.store.postgres import PostgresStore
from channel_server.store.sqlite import SQLiteStore
kind, where, then = sys.argv[1:]
store = SQLiteStore(where) if kind == "sqlite" else PostgresStore(where, "broker-1")
store.save_channel(ChannelRecord("c", "queue"))
store.save_group("c", "g", 0)
store.append("c", [Event("a", "pub", 0, 1.0, "x", 0)], 1, 7.0)
store.save_owners("c", "g", {("pub", 0): "s3"})
store.ack("c", "g", [0])  # s3 processed "a": its ack is deferred ...
if then == "move":
    store.save_owners("c", "g", {("pub", 0): "s2"})  # ... and the partition moves to s2
else:
    store.remove_member("c", "g", "s3")  # ... or s3 unsubscribes
os._exit(0)  # a crash: no close, no background write
"""


@pytest.mark.parametrize("then", ["move", "leave"])
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_partition_never_leaves_its_owner_on_disk_ahead_of_the_owners_acks(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, then: str
) -> None:
    """Chaos seed 326701: s2 joined, s3 acknowledged a partition's events, the partition
    moved to s2, and the broker was killed before the deferred ack was written. After the
    restart the events came back to s2, the owner on disk, which processed them again.
    The same holds for an owner that unsubscribes after its last ack (``leave``): a
    restored partition whose owner is gone goes to another member."""
    where = str(tmp_path / "data") if kind == "sqlite" else request.getfixturevalue("pg_dsn")
    subprocess.run([sys.executable, "-c", CRASH_AFTER_MOVE, kind, where, then], check=True)
    store = SQLiteStore(Path(where)) if kind == "sqlite" else PostgresStore(where, "broker-1")
    try:
        if isinstance(store, PostgresStore):
            assert store.acquire("c", LEASE_S) is not None
        snap = store.load("c")
        if then == "move":
            assert snap.owners == {"g": {("pub", 0): "s2"}}
        assert snap.acks.get("g") == {0}  # done: not pending for another member
    finally:
        store.close()


def test_deleted_events_keep_their_ids_however_scattered(store: Store) -> None:
    """Acks of many partitions delete scattered offsets (the SQLite store writes those
    with one statement over a list, runs with one per run): either way the events go and
    their ids stay in the window."""
    store.save_channel(ChannelRecord("c", "queue"))
    store.append("c", [ev(i, float(i)) for i in range(40)], 40, 0.0)
    scattered = list(range(0, 40, 3))
    store.delete("c", scattered)
    store.delete("c", list(range(30, 40)))  # a run (some of it deleted already)
    snap = store.load("c")
    gone = set(scattered) | set(range(30, 40))
    assert [e.offset for e in snap.events] == [i for i in range(40) if i not in gone]
    assert store.count("c") == 40 - len(gone)
    if store.durable:  # the memory store keeps no window
        assert {event_id for _, event_id, _ in snap.delivered} == {f"id-{i}" for i in range(40)}


def test_a_removed_channel_is_forgotten_and_its_name_starts_empty(opener: Opener) -> None:
    """An admin's delete: nothing of the channel is left (a topic made once counted
    against --max-channels for good, session 34's soak), but the sessions its lives
    claimed stay claimed."""
    store = opener()
    store.save_channel(ChannelRecord("c", "queue"))
    store.save_channel(ChannelRecord("keep", "queue"))
    store.append("c", [ev(0, 1.0), ev(1, 2.0), ev(2, 3.0)], 3, 5.0)
    store.append("keep", [ev(0, 1.0)], 1, 5.0)
    store.save_group("c", "g", 0)
    store.ack("c", "g", [1])
    store.save_owners("c", "g", {("pub", 0): "s1"})
    store.save_member(MemberRecord("c", "g", "s1", "PYRO:x@127.0.0.1:9", 100))
    store.add_dead_letters("c", [DeadLetterRecord("g", ev(2, 3.0), "boom")])
    store.delete("c", [0])  # its id kept in the delivered window
    claimed = store.claim_sessions("c", 5_000)
    store.remove_channel("c")
    _forgotten_but_keep(store)
    again = opener()  # a restart
    _forgotten_but_keep(again)
    again.save_channel(ChannelRecord("c", "topic"))  # its name again: a new channel
    assert again.claim_sessions("c", 1) > claimed
    again.append("c", [ev(0, 1.0)], 1, 6.0)
    assert [e.offset for e in again.load("c").events] == [0]
    assert again.count("c") == 1


def _forgotten_but_keep(store: Store) -> None:
    assert store.channels() == [ChannelRecord("keep", "queue", "publisher")]
    snap = store.load("c")
    assert (snap.events, snap.groups, snap.acks, snap.members) == ([], {}, {}, [])
    assert (snap.dead_letters, snap.delivered, snap.next_offset) == ([], [], 0)
    assert snap.owners.get("g", {}) == {}
    assert [e.offset for e in store.load("keep").events] == [0]
