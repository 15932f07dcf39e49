"""Moving partitions between members of a group (DESIGN §5), pure.

Only a *movable* partition changes owner: nothing in flight (so no batch is split and
nothing overtakes an event being processed) and no restored event still owed to its owner
(after a restart). A moved partition keeps its queue, so order is never broken.

- A joining member takes movable partitions (each donor's longest owned first) from the
  members owning the most, until no one is more than ``rebalance_threshold`` partitions
  ahead of it; as partitions become movable later, progress carries the same rebalance on
  (``ConsumerGroup.rebalancing``), until the counts are even. Counts that drift apart
  otherwise are left alone: new partitions go to the least *loaded* member, which may own
  a few more than another, and evening the counts after every ack would move idle
  partitions back and forth, each move written to the store (a key per order opens a
  partition per event).
- A member with nothing to do takes a ready partition from a busy member that has other
  work in hand and no room for it (work stealing), so no batch waits behind a long job it
  could go around.
- A slow member (long delays) hands its movable queued partitions to the others, and so
  does a member that is leaving (it declined a push: it is stopping).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from channel_server.events import PartitionKey

if TYPE_CHECKING:
    from channel_server.core.group import ConsumerGroup
    from channel_server.core.member import Member
    from channel_server.core.queues import PartitionQueue

SLOW, LEAVING = "slow", "leaving"
"""Why a member's queued partitions were handed on (``ConsumerGroup.offloads``)."""


def rebalance_to(group: ConsumerGroup, newcomer: Member) -> list[PartitionKey]:
    """Move movable partitions from the members owning the most to ``newcomer`` until no
    donor is more than ``rebalance_threshold`` partitions ahead of it."""
    moved: list[PartitionKey] = []
    donors = sorted((m for m in group.active_members() if m is not newcomer), key=_size_order)
    while donors:  # donors[-1] owns the most (ties: the highest id)
        donor = donors.pop()
        if len(donor.partitions) - len(newcomer.partitions) <= group.policy.rebalance_threshold:
            break
        pq = _first_movable(group, donor)
        if pq is None:
            continue
        group.move(pq, newcomer)
        moved.append(pq.key)
        bisect.insort(donors, donor, key=_size_order)
    return moved


def _first_movable(group: ConsumerGroup, donor: Member) -> PartitionQueue | None:
    """The movable partition the donor has owned longest: the scan usually stops at the
    first one, where picking by key would read all of a member's thousands."""
    for key in donor.partitions:
        pq = group.partitions[key]
        if pq.movable:
            return pq
    return None


def _size_order(member: Member) -> tuple[int, str]:
    return len(member.partitions), member.member_id


def after_progress(group: ConsumerGroup, member: Member) -> list[PartitionKey]:
    """After a member finished events: a slow member's partitions that became movable
    leave it; then a join's rebalance carries on, and an idle member may steal work."""
    moved = offload(group, member.member_id) if member.offloaded and member.active else []
    if group.rebalancing:
        moved += rebalance(group)
    return moved + steal(group, member)


def fast_again(group: ConsumerGroup, member: Member) -> None:
    """A push to a member offloaded for slowness was fast: it may be given work again, and
    progress evens the counts out (see ``group.rebalancing``)."""
    if member.offloaded:
        member.offloaded = False
        group.rebalancing = True


def rebalance(group: ConsumerGroup) -> list[PartitionKey]:
    """The active member owning the fewest partitions takes movable ones from the busiest
    (see rebalance_to); members offloaded for slowness are not given more. Once the
    counts are even, progress stops carrying a rebalance on (``group.rebalancing``)."""
    active = group.active_members()
    if _even(group, active):
        group.rebalancing = False
        return []
    takers = [m for m in active if not m.offloaded]
    if not takers:
        return []
    moved = rebalance_to(group, min(takers, key=lambda m: (len(m.partitions), m.member_id)))
    group.rebalancing = not _even(group, active)
    return moved


def _even(group: ConsumerGroup, active: list[Member]) -> bool:
    """No active member owns more than ``rebalance_threshold`` partitions above another."""
    sizes = [len(m.partitions) for m in active]
    return len(sizes) < 2 or max(sizes) - min(sizes) <= group.policy.rebalance_threshold


def steal(group: ConsumerGroup, member: Member) -> list[PartitionKey]:
    """When ``member`` has nothing to do, give it the oldest ready partition of the busiest
    member that has other work in hand and no room to take it, if that leaves the stealer
    owning no more (or the donor is stalled: it does none of its work now). (A member
    with room gets its ready work pushed; moving a partition whose push only lingers for
    an ack would split a run of events between members for nothing.)"""
    if not member.active or member.flights or member.ready or member.offloaded:
        return []
    best: tuple[PartitionQueue, Member] | None = None
    for donor in group.active_members():
        if donor is member:
            continue
        if len(donor.partitions) < len(member.partitions) + 1 and not donor.stalled:
            continue  # (a stalled one's ready work goes, whoever owns more)
        if not donor.flights and len(donor.ready) < 2:
            continue  # its only work: moving it would just move the wait
        if donor.room > 0:
            continue  # it has room for its ready work: the push is coming (or lingers)
        for key in donor.ready:
            pq = group.partitions[key]
            if pq.movable and (best is None or pq.pending[0] < best[0].pending[0]):
                best = (pq, donor)
    if best is None:
        return []
    group.move(best[0], member)
    return [best[0].key]


def around_stalls(group: ConsumerGroup) -> list[PartitionKey]:
    """Some members are stalled (see ``health.stalled``: nothing more is pushed to them
    till they progress): each idle member takes one of their ready partitions. Their
    windows, sized from past pace, took work behind a long job while another member sat
    idle (session 34's newcomer: 16 short events waited out a 20 s job)."""
    moved: list[PartitionKey] = []
    for member in group.active_members():
        moved += steal(group, member)
    return moved


def offload(group: ConsumerGroup, member_id: str) -> list[PartitionKey]:
    """Move a slow member's movable queued partitions to the least-loaded others; the
    member stays active (DESIGN §6, long delays). It stays ``offloaded`` until a push of
    its is fast again, so partitions in flight now leave once their events are done."""
    member = group.members[member_id]
    member.offloaded = True
    moved = _hand_on(group, member)
    if moved:
        group.offloads.append((member_id, len(moved), SLOW))
        member.offloads += 1
    return moved


def leaving(group: ConsumerGroup, member_id: str) -> list[PartitionKey]:
    """A member declined a push (it is stopping, and unsubscribes once the event in hand
    is done): its movable queued partitions go to the others now. They waited for the
    event in hand, a long job's whole length with others idle (session 34's newcomer)."""
    member = group.members.get(member_id)
    if member is None or not member.active:
        return []
    moved = _hand_on(group, member)
    if moved:
        group.offloads.append((member_id, len(moved), LEAVING))
    return moved


def _hand_on(group: ConsumerGroup, member: Member) -> list[PartitionKey]:
    """Move the member's movable queued partitions to the least-loaded others, the
    oldest work first (all of them stay when nobody else is active)."""
    waiting = [
        group.partitions[k]
        for k in member.partitions
        if group.partitions[k].pending and group.partitions[k].movable
    ]
    moved = []
    book = group.loads(exclude=member.member_id)
    for pq in sorted(waiting, key=lambda q: q.pending[0]):
        group.take_away(pq)
        if group.assign(pq, book=book) is None:
            group.give(pq, member)  # nobody else is active: keep it
            break
        moved.append(pq.key)
    return moved
