"""What an ack message does to a group (DESIGN §6), pure functions over a group.

An ack message names events by uid (``publisher_id/id``): acked ones are done; nacked
ones are retried, or dead-lettered after ``max_attempts`` handler failures; returned ones
were not handled (an earlier event of their partition failed) and wait for it; events
delivered from the message's ``from_seq`` up to its ``through_seq`` that it names neither
way were skipped (a lost ack). A subscriber's messages cover ranges of seqs that do not
overlap, so they may arrive in any order (one in a push's reply, the next on the
subscriber's own connection); an older subscriber's messages start at 0, in order. Acks
name facts, so an ack of an ended session still resolves what the member holds again, or
owes (restored or held back for it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat, takewhile
from typing import TYPE_CHECKING

from channel_server.core import poison, rebalance
from channel_server.core.delivery import by_key, current, flights_in, give_back
from channel_server.core.member import Flight, Member
from channel_server.core.queues import PartitionQueue
from channel_server.events import EVENT_ACCEPTED_AT, Event

if TYPE_CHECKING:
    from channel_server.core.group import ConsumerGroup


@dataclass
class AckOutcome:
    """What an ack message did: events now done in this group, put back, or dead-lettered."""

    done: list[Event] = field(default_factory=list)
    retried: list[Event] = field(default_factory=list)
    dead: list[tuple[Event, str]] = field(default_factory=list)
    missing: int = 0
    """Events the message should have covered but skipped (a lost ack): redelivered."""
    deactivated: bool = False
    stale: bool = False
    """The message belongs to a session that is over (or a member that is gone)."""


def acknowledge(
    group: ConsumerGroup,
    member_id: str,
    session: int,
    acked: Iterable[str],
    nacked: dict[str, str],
    through_seq: int,
    now: float,
    from_seq: int = 0,
    returned: Iterable[str] = (),
) -> AckOutcome:
    """Apply an ack message (events named by uid): acked ones are done; nacked ones are
    retried or, after ``max_attempts`` handler failures, dead; returned ones go back
    behind them, counting against nobody; events delivered with seqs from ``from_seq``
    through ``through_seq`` that it names in no way were skipped (a lost ack) and go
    back, counting as a failed attempt of the member."""
    member = current(group, member_id, session)
    if member is None:
        return stale_acks(group, member_id, acked)
    member.seen(now)
    member.ack_messages += 1
    outcome = AckOutcome()
    busy_since = member.busy_since
    finished: list[Event] = []
    failed: list[Flight] = []
    elsewhere: list[str] = []
    failures = group.handler_failures
    for uid in acked:
        flight = member.flights.pop(uid, None)
        if flight is not None:
            if failures:
                failures.pop(flight.event.offset, None)
            finished.append(flight.event)
        else:
            elsewhere.append(uid)
    outcome.done.extend(finished)
    for uid, error in nacked.items():
        flight = member.flights.pop(uid, None)
        if flight is None:
            continue
        group.nacked += 1
        if handler_failed(group, flight.event):
            outcome.dead.append((flight.event, error))
            finished.append(flight.event)
        else:
            failed.append(flight)
    untried = [f for f in map(member.flights.pop, returned, repeat(None)) if f is not None]
    # flights are in delivery order: the skipped ones are within a prefix, so an ack costs
    # what it names and skips, not everything the member holds (thousands at many partitions)
    within = takewhile(lambda f: f.seq <= through_seq, member.flights.values())
    skipped = [f for f in within if f.seq >= from_seq]
    outcome.missing = len(skipped)
    for flight in skipped:
        del member.flights[flight.event.uid]
    outcome.retried = [f.event for f in failed + untried + skipped]
    outcome.done.extend(ack_owed(group, member, elsewhere))
    member.acked += len(outcome.done)
    group.ack_latency.observe_ages(now, map(EVENT_ACCEPTED_AT, outcome.done))
    finish(group, member, finished)
    # the handler failed: anyone may retry it, and what waited for it goes back behind it
    give_back(group, member, failed, hold=False)
    give_back(group, member, untried, hold=False, reached=False)  # never run: same attempt
    give_back(group, member, skipped)  # processed, maybe: they stay with the member
    completed = len(finished) + len(failed)
    if busy_since is not None:
        member.window.observe(completed, now - busy_since)
    if not member.flights:
        member.busy_since = None
    elif completed:  # progress: an ack that finished nothing (a push's empty answer) is none
        member.busy_since = now
    outcome.deactivated = count_acks(group, member, outcome.missing, completed)
    if member.active and member.ready:
        group.touched.add(member_id)  # it has room again for what was waiting
    return outcome


def unpushable(
    group: ConsumerGroup, member_id: str, session: int, seqs: range, reasons: dict[str, str]
) -> AckOutcome:
    """A delivery (the member's ``seqs`` of ``session``) could not be handed over for the
    fault of some of its events (they cannot cross the wire): those are dead
    (``reasons``: event uid -> why), and the rest goes back, not held (nothing reached the
    member). Nothing counts against the member."""
    outcome = AckOutcome()
    member = current(group, member_id, session)
    if member is None:
        return outcome
    flights = flights_in(member, seqs)
    for flight in flights:
        del member.flights[flight.event.uid]
    dead = [f.event for f in flights if f.event.uid in reasons]
    outcome.dead = [(ev, reasons[ev.uid]) for ev in dead]
    back = [f for f in flights if f.event.uid not in reasons]
    outcome.retried = [f.event for f in back]
    finish(group, member, dead)
    give_back(group, member, back, hold=False, reached=False)  # the push was never sent
    if not member.flights:
        member.busy_since = None
    return outcome


def stale_acks(group: ConsumerGroup, member_id: str, acked: Iterable[str]) -> AckOutcome:
    """Acks of an ended session (a broker restart, or a resubscribe) still say what
    the member processed: what it holds again in its new session is done, and so is
    what ``_ack_owed`` finds; nothing else of them counts."""
    outcome = AckOutcome(stale=True)
    member = group.members.get(member_id)
    if member is None or not member.active:
        return outcome
    rest = []
    for uid in acked:
        flight = member.flights.pop(uid, None)
        if flight is None:
            rest.append(uid)
        else:
            group.handler_failures.pop(flight.event.offset, None)
            outcome.done.append(flight.event)
    owed = ack_owed(group, member, rest)
    finish(group, member, list(outcome.done))
    outcome.done.extend(owed)
    member.acked += len(outcome.done)
    if not member.flights:
        member.busy_since = None
    return outcome


def ack_owed(group: ConsumerGroup, member: Member, acked: Iterable[str]) -> list[Event]:
    """Acked uids the member does not hold may name events waiting in its partitions
    that it processed already (restored after a restart, or back after a lost ack):
    those are done now, instead of going to someone else when the partition moves."""
    wanted = set(acked)
    found: list[Event] = []
    if not wanted:
        return found  # the usual ack: no pass over the member's partitions
    for key in list(member.partitions):
        pq = group.partitions[key]
        if not wanted or not (pq.pinned or pq.held_back):
            continue
        done = [ev for ev in pq.pending if ev.uid in wanted]
        pq.remove_pending(done)
        for ev in done:
            group.handler_failures.pop(ev.offset, None)
            group.attempts.pop(ev.offset, None)  # given back, never launched again
        member.queued -= len(done)
        member.owed -= sum(1 for ev in done if ev.offset in pq.held_back)
        wanted.difference_update(ev.uid for ev in done)
        poison.cleared(group, done)
        unpin(group, pq, done)
        group.refresh(pq)
        found.extend(done)
    group.held -= len(found)
    return found


def handler_failed(group: ConsumerGroup, event: Event) -> bool:
    """One more handler failure of an event; True when it should be dead-lettered."""
    failures = group.handler_failures.get(event.offset, 0) + 1
    if failures >= group.policy.max_attempts:
        group.handler_failures.pop(event.offset, None)
        return True
    group.handler_failures[event.offset] = failures
    return False


def count_acks(group: ConsumerGroup, member: Member, missing: int, completed: int) -> bool:
    if not missing:
        if completed:
            member.ack_failures = 0
        return False
    member.failures += 1
    member.ack_failures += 1
    if member.ack_failures >= group.policy.max_attempts:
        group.deactivate(member.member_id, f"acks missing {member.ack_failures} times in a row")
        return True
    return False


def finish(group: ConsumerGroup, member: Member, events: list[Event]) -> None:
    """Events done (acked or dead) in this group: out of their partitions for good."""
    group.held -= len(events)
    poison.cleared(group, events)
    partitions, resolved = group.partitions, []
    for key, done in by_key(events).items():
        pq = partitions[key]
        pq.resolve(done)
        if pq.pinned or pq.held_back:
            unpin(group, pq, done)
        resolved.append(pq)
    group.refresh_many(resolved)
    if events:
        rebalance.after_progress(group, member)


def unpin(group: ConsumerGroup, pq: PartitionQueue, resolved: list[Event]) -> None:
    if pq.pinned:
        pq.pinned = max(0, pq.pinned - sum(ev.offset < group.pin_below for ev in resolved))
    pq.unhold(ev.offset for ev in resolved)
