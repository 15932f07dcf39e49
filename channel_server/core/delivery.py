"""Handing events to a member and taking them back (DESIGN §6), pure functions over a group.

A push only hands a batch over; what the member holds is tracked as flights (per-session
delivery seq). A failed push or ping counts against the member, and ``max_attempts`` of
them in a row make it inactive. Events that come back from a member that may have
processed them (a lost ack, a failed push that may have arrived) are *held back* for it.

An event's ``attempt`` counts its deliveries that reached, or may have reached, a member (a
failed push may have arrived), so a handler can tell an event it may have seen before.
It is not bounded by ``max_attempts``, which counts failures of one member in a row and
handler failures of one event: after ``max_attempts`` failed pushes to one member the next
delivery, elsewhere, is attempt ``max_attempts + 1``. A delivery that surely never reached
anyone (declined, or not sent at all) is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from channel_server.core import poison
from channel_server.core.member import Batch, Flight, Member
from channel_server.events import Event, PartitionKey

if TYPE_CHECKING:
    from channel_server.core.group import ConsumerGroup


def take_batch(group: ConsumerGroup, member_id: str, now: float) -> Batch | None:
    """The next push for a member: its ready partitions, round robin, up to its room."""
    member = group.members.get(member_id)
    if member is None or not member.active or now < member.retry_at:
        return None
    member.check_stall(now)  # a long job in hand: nothing more behind it
    if group.suspects and (suspect := poison.ready_suspect(group, member)) is not None:
        return None if member.flights else _take_alone(group, member, suspect, now)
    budget = member.room
    events: list[Event] = []
    emptied: list[PartitionKey] = []
    partitions, warm = group.partitions, group.warm
    for key in member.ready:  # not copied: a member may own thousands of ready partitions
        if budget <= 0 and not member.owed:
            break
        try:
            taken, fresh = partitions[key].take(budget, warm)
        except Exception:  # reading cold payloads failed (a lost row, the store's error)
            if not events:
                raise  # nothing of this partition was taken
            break  # send what was taken; the next push meets the failure again, alone
        if not taken:
            continue
        emptied.append(key)
        member.owed -= len(taken) - fresh
        events.extend(taken)
        budget -= fresh
    for key in emptied:
        del member.ready[key]
    return launch(group, member, events, now) if events else None


def _take_alone(group: ConsumerGroup, member: Member, key: PartitionKey, now: float) -> Batch:
    """A push of only the next event of the partition ``key``: a suspect of killing its
    subscribers (see :mod:`~channel_server.core.poison`)."""
    taken, fresh = group.partitions[key].take_head(group.warm)
    del member.ready[key]
    member.owed -= len(taken) - fresh
    return launch(group, member, taken, now)


def take_event(group: ConsumerGroup, member_id: str, uid: str, now: float) -> Batch | None:
    """A one-event batch of the event ``uid`` when it is next in one of the member's
    partitions (a pull client acknowledging what it got before a restart)."""
    member = group.members.get(member_id)
    if member is None:
        return None
    for key in list(member.ready):
        pq = group.partitions[key]
        if pq.pending[0].uid == uid:
            taken, fresh = pq.take(1, group.warm)
            del member.ready[key]
            member.owed -= len(taken) - fresh
            return launch(group, member, taken, now)
    return None


def launch(group: ConsumerGroup, member: Member, events: list[Event], now: float) -> Batch:
    """Account events taken from the member's partitions as held by it."""
    if not member.flights:
        member.busy_since = now
    if group.attempts:
        attempts = [group.attempts.pop(ev.offset, 0) + 1 for ev in events]
        group.redelivered += sum(a > 1 for a in attempts)
    else:
        attempts = [1] * len(events)  # the usual push: none of them was delivered before
    first = member.next_seq
    for i, (ev, attempt) in enumerate(zip(events, attempts, strict=True)):
        member.flights[ev.uid] = Flight(ev, attempt, first + i, now)
    member.next_seq += len(events)
    member.queued -= len(events)
    member.delivered += len(events)
    member.batches += 1
    return Batch(group.name, member.member_id, member.session, first, events, attempts)


def current(group: ConsumerGroup, member_id: str, session: int) -> Member | None:
    """The member if it is active in that session (else the message is stale)."""
    member = group.members.get(member_id)
    if member is None or member.session != session or not member.active:
        return None
    return member


def delivered(group: ConsumerGroup, batch: Batch, now: float) -> bool:
    """A push was answered. False when the batch is stale (its events moved on)."""
    member = current(group, batch.member_id, batch.session)
    if member is None:
        return False
    member.seen(now)
    member.transport_failures = 0
    member.answered_seq = max(member.answered_seq, batch.seqs[-1])
    return True


def push_failed(group: ConsumerGroup, batch: Batch, now: float, sent: bool = True) -> bool:
    """A push failed in transport: its events go back; the member retries after a
    back-off. ``sent``: the push went out (the member may have died of it; else the
    connection or a ping failed first). Returns True when this failure made the member
    inactive."""
    member = current(group, batch.member_id, batch.session)
    if member is None:
        return False
    flights = _flights_of(member, batch)
    alone = len(flights) == len(member.flights) == 1
    if sent:
        member.maybe_killed_by = None  # it was alive when this went: no death before
    unfly(group, member, flights)
    gave_up = transport_failure(group, member, now, f"{len(batch.events)}-event push failed")
    if sent and not gave_up:
        poison.push_lost(group, member, flights, alone)
    return gave_up


def push_declined(group: ConsumerGroup, batch: Batch, now: float, pause_s: float) -> None:
    """The member is leaving (it is stopping and will unsubscribe): it took nothing, so
    the events go back, not held; no push for ``pause_s``; no failure counted."""
    member = current(group, batch.member_id, batch.session)
    if member is None:
        return
    flights = _flights_of(member, batch)
    for flight in flights:
        del member.flights[flight.event.uid]
    give_back(group, member, flights, hold=False, reached=False)
    if not member.flights:
        member.busy_since = None
    member.retry_at = now + pause_s


def reclaim(group: ConsumerGroup, member_id: str, sent_before: float) -> int:
    """The member says it holds nothing of its session, yet events given to it before
    ``sent_before`` are unresolved: they were lost on the way (a late push of a dead
    broker replaced them, say). They go back, held for the member, which gets them again
    (its processed-ID window acknowledges those it did). Returns how many."""
    member = group.members.get(member_id)
    if member is None or not member.active:
        return 0
    lost = [f for f in member.flights.values() if f.sent_at < sent_before]
    unfly(group, member, lost)
    return len(lost)


def _flights_of(member: Member, batch: Batch) -> list[Flight]:
    return flights_in(member, batch.seqs)


def flights_in(member: Member, seqs: range) -> list[Flight]:
    """What the member holds of the deliveries numbered ``seqs`` (one push)."""
    return [f for f in member.flights.values() if f.seq in seqs]


def probe_failed(group: ConsumerGroup, member_id: str, now: float) -> bool:
    """A silent member did not answer a ping. True when it is now inactive."""
    member = group.members.get(member_id)
    if member is None or not member.active:
        return False
    return transport_failure(group, member, now, "no answer to pings")


def probe_answered(group: ConsumerGroup, member_id: str, now: float) -> None:
    member = group.members.get(member_id)
    if member is not None:
        member.seen(now)
        member.transport_failures = 0


def transport_failure(group: ConsumerGroup, member: Member, now: float, what: str) -> bool:
    member.failures += 1
    member.transport_failures += 1
    failures = member.transport_failures
    if failures >= group.policy.max_attempts:
        group.deactivate(member.member_id, f"{what}, {failures} failures in a row")
        return True
    member.retry_at = now + group.policy.retry_backoff_s * 2 ** (failures - 1)
    return False


def unfly(group: ConsumerGroup, member: Member, flights: list[Flight]) -> None:
    for flight in flights:
        member.flights.pop(flight.event.uid, None)
    give_back(group, member, flights)
    if not member.flights:
        member.busy_since = None


def give_back(
    group: ConsumerGroup,
    member: Member,
    flights: list[Flight],
    hold: bool = True,
    reached: bool = True,
) -> None:
    """Put events that were held back at their place in their partitions. ``hold``: the
    member may have processed them (a skipped ack, a failed push): they stay with it
    (PartitionQueue.held_back). ``reached``: the delivery reached (or may have reached)
    the member, so the next one is the next attempt; else it is this attempt again, and
    what the member owed before this delivery (an earlier ack of it lost) it still owes."""
    for flight in flights:
        group.attempts[flight.event.offset] = flight.attempt if reached else flight.attempt - 1
    for key, events in by_key(f.event for f in flights).items():
        pq = group.partitions[key]
        pq.resolve(events)
        mine = pq.owner == member.member_id
        if hold and mine:
            pq.hold(ev.offset for ev in events)
            member.owed += len(events)
        elif not reached and mine:
            member.owed += sum(1 for ev in events if ev.offset in pq.held_back)
        else:
            pq.unhold(ev.offset for ev in events)
        added = pq.put_back(events)
        if pq.owner is not None:
            group.members[pq.owner].queued += added
        group.refresh(pq)


def by_key(events: Iterable[Event]) -> dict[PartitionKey, list[Event]]:
    """Events grouped by partition, in the order given."""
    grouped: dict[PartitionKey, list[Event]] = {}
    for ev in events:  # (ev.key, inlined: a call per event)
        grouped.setdefault((ev.publisher_id, ev.partition), []).append(ev)
    return grouped
