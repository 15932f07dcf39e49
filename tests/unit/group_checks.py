"""Shared helpers: build events and check a ConsumerGroup's bookkeeping invariants."""

from __future__ import annotations

from collections.abc import Iterable

from channel_server.core.group import ConsumerGroup
from channel_server.events import Event, Partition


def make_event(offset: int, partition: Partition = 0, ts: float | None = None, pub: str = "p"):
    """Event ``e<offset>``; its timestamp defaults to its offset."""
    return Event(f"e{offset}", pub, partition, float(offset) if ts is None else ts, None, offset)


def ids(events: Iterable[Event]) -> list[str]:
    return [ev.id for ev in events]


def uids(events: Iterable[Event]) -> list[str]:
    """What acks name: ``publisher_id/id``."""
    return [ev.uid for ev in events]


def owners(group: ConsumerGroup) -> dict:
    return {key: pq.owner for key, pq in group.partitions.items()}


def pending_ids(group: ConsumerGroup, key) -> list[str]:
    return ids(group.partitions[key].pending)


def check_group(group: ConsumerGroup) -> None:
    """Assert the structural invariants of a group.

    - every partition's events carry its key; pending is sorted; no event is held twice;
    - each partition's in-flight events are exactly the flights of its owner with that key,
      and only an active member holds flights;
    - ownership is symmetric: ``pq.owner`` names a member that lists the partition, and a
      member lists only partitions it owns (so no partition has two owners); an inactive
      member owns nothing;
    - a member's ready set is exactly its partitions that are ready;
    - with an active member, no partition with pending events is left without an owner;
    - ``queued`` / ``in_flight`` counters match the queues and the flights.
    """
    held: set[int] = set()
    for key, pq in group.partitions.items():
        events = list(pq.pending) + list(pq.in_flight)
        assert all(ev.key == key for ev in events), key
        assert list(pq.pending) == sorted(pq.pending), key
        offsets = [ev.offset for ev in events]
        assert len(set(offsets)) == len(offsets), f"{key} holds an event twice"
        assert held.isdisjoint(offsets), f"{key} shares an event with another partition"
        held.update(offsets)
        if pq.owner is not None:
            assert pq.owner in group.members, f"{key} owned by departed {pq.owner}"
            member = group.members[pq.owner]
            assert key in member.partitions, f"{key} not listed by its owner {pq.owner}"
            assert member.active, f"inactive {pq.owner} keeps {key}"
            flying = [f.event for f in member.flights.values() if f.event.key == key]
            assert ids(pq.in_flight) == ids(flying), key
        else:
            assert not pq.in_flight, f"{key} in flight without an owner"
    for member in group.members.values():
        for key in member.partitions:
            assert key in group.partitions, f"{member.member_id} lists dropped {key}"
            assert group.partitions[key].owner == member.member_id, (key, member.member_id)
        for uid, flight in member.flights.items():
            assert flight.event.key in member.partitions, (member.member_id, flight.event.id)
            assert uid == flight.event.uid, (member.member_id, uid)
        ready = {k for k in member.partitions if group.partitions[k].ready}
        assert set(member.ready) == ready, (member.member_id, member.ready, ready)
        queued = sum(len(group.partitions[k].pending) for k in member.partitions)
        assert member.queued == queued, (member.member_id, member.queued, queued)
        owed = sum(group.partitions[k].held_pending() for k in member.partitions)
        assert member.owed == owed, (member.member_id, member.owed, owed)
        if not member.active:
            assert not member.partitions and not member.flights, member.member_id
    if group.active_members():
        for key, pq in group.partitions.items():
            assert not pq.pending or pq.owner is not None, f"{key} waits with no owner"
