"""MemoryStore: what the in-memory backup keeps and gives back (DESIGN §7, ``--memory``).

The behaviour every store shares is in test_store_contract.py; these are the checks of the
memory store on its own: order, isolation, members and channels, and what it does not keep.
"""

from __future__ import annotations

from channel_server.events import Event
from channel_server.store import MemoryStore, Store
from channel_server.store.base import ChannelRecord, DeadLetterRecord, MemberRecord


def ev(offset: int, ts: float, event_id: str | None = None) -> Event:
    return Event(event_id or f"e{offset}", "pub", offset % 2, ts, {"n": offset}, offset)


def offsets(events: list[Event]) -> list[int]:
    return [e.offset for e in events]


def test_not_durable_and_keeps_no_delivered_window() -> None:
    store = MemoryStore()
    assert store.durable is False
    store.append("c", [ev(0, 1.0)], next_offset=1, accepted_at=10.0)
    assert store.load("c").delivered == []
    store.trim_delivered("c", 5)  # nothing to trim, no error
    store.close()


def test_unknown_channel_loads_empty() -> None:
    snap = MemoryStore().load("nobody")
    assert (snap.next_offset, snap.events, snap.members, snap.groups) == (0, [], [], {})


def test_channels_in_creation_order_first_record_wins() -> None:
    store = MemoryStore()
    store.save_channel(ChannelRecord("b", "queue"))
    store.save_channel(ChannelRecord("a", "topic"))
    store.save_channel(ChannelRecord("b", "topic"))
    assert store.channels() == [ChannelRecord("b", "queue"), ChannelRecord("a", "topic")]


def test_events_come_back_in_timestamp_offset_order() -> None:
    store = MemoryStore()
    store.append("c", [ev(0, 5.0), ev(1, 1.0), ev(2, 3.0)], next_offset=3, accepted_at=0.0)
    store.append("c", [ev(3, 1.0), ev(4, 0.0)], next_offset=5, accepted_at=1.0)
    snap = store.load("c")
    assert offsets(snap.events) == [4, 1, 3, 2, 0]
    assert snap.events[0].payload == {"n": 4}
    assert snap.next_offset == 5
    assert store.count("c") == 5


def test_next_offset_never_goes_back() -> None:
    store = MemoryStore()
    store.append("c", [ev(5, 1.0)], next_offset=6, accepted_at=0.0)
    store.append("c", [ev(2, 1.0)], next_offset=3, accepted_at=0.0)
    assert store.load("c").next_offset == 6


def test_delete_forgets_events_and_their_acks_unknown_offsets_ignored() -> None:
    store = MemoryStore()
    store.append("c", [ev(i, float(i)) for i in range(4)], 4, 0.0)
    store.ack("c", "audit", [0, 1])
    assert offsets(store.load("c").events) == [0, 1, 2, 3]  # ack alone keeps the event
    store.delete("c", [0, 2, 99])
    snap = store.load("c")
    assert offsets(snap.events) == [1, 3]
    assert snap.acks == {"audit": {1}}
    store.delete("c", [1, 3])
    assert store.load("c").events == []
    assert store.count("c") == 0


def test_load_returns_copies() -> None:
    store = MemoryStore()
    store.append("c", [ev(0, 1.0)], 1, 0.0)
    store.ack("c", "g", [0])
    snap = store.load("c")
    snap.events.clear()
    snap.acks["g"].add(42)
    again = store.load("c")
    assert offsets(again.events) == [0]
    assert again.acks == {"g": {0}}


def test_channels_are_separate() -> None:
    store = MemoryStore()
    store.append("a", [ev(0, 1.0)], 1, 0.0)
    store.append("b", [ev(0, 2.0, "other")], 1, 0.0)
    store.delete("a", [0])
    assert store.load("a").events == []
    assert [e.id for e in store.load("b").events] == ["other"]


def test_members_saved_replaced_removed_per_channel() -> None:
    store = MemoryStore()
    one = MemberRecord("c", "default", "s1", "PYRO:s1@127.0.0.1:1", 10)
    two = MemberRecord("c", "audit", "s1", "PYRO:s1@127.0.0.1:1", 5)
    elsewhere = MemberRecord("d", "default", "s9", "PYRO:s9@127.0.0.1:9", 1)
    for record in (one, two, elsewhere):
        store.save_member(record)
    assert sorted(store.load("c").members, key=lambda r: r.group) == [two, one]
    moved = MemberRecord("c", "default", "s1", "PYRO:s1@127.0.0.1:2", 20)
    store.save_member(moved)
    assert sorted(store.load("c").members, key=lambda r: r.group) == [two, moved]
    store.remove_member("c", "default", "s1")
    store.remove_member("c", "default", "nobody")
    assert store.load("c").members == [two]
    assert store.load("d").members == [elsewhere]


def test_dead_letter_outlives_its_deleted_event_and_can_be_reinserted() -> None:
    store = MemoryStore()
    poison = ev(3, 1.0)
    store.append("c", [poison], 4, 0.0)
    store.add_dead_letters("c", [DeadLetterRecord("default", poison, "boom")])
    store.delete("c", [3])
    assert [d.event.id for d in store.load("c").dead_letters] == ["e3"]
    store.reinsert("c", [poison], accepted_at=1.0)
    store.remove_dead_letters("c", "default", [3])
    snap = store.load("c")
    assert (offsets(snap.events), snap.dead_letters) == ([3], [])


def test_offsets_helper() -> None:
    assert Store.offsets([ev(3, 1.0), ev(7, 0.0)]) == [3, 7]
