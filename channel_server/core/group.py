"""One consumer group: its members, partition ownership, events held and acks.

Pure bookkeeping (DESIGN §4-§6): no clock reads, no threads, no I/O. The channel facade
holds the lock, performs the pushes and passes ``now`` in; this class decides what to push,
to whom, and what a delivery, an ack, a failure or a silence changes. Where partitions move
between members is decided in :mod:`channel_server.core.rebalance`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from channel_server.core import rebalance
from channel_server.core.assignment import least_loaded
from channel_server.core.health import DelayPolicy, DelayTracker
from channel_server.core.member import Batch, Flight, Member, Window, WindowPolicy
from channel_server.core.queues import PartitionQueue
from channel_server.events import Event, PartitionKey


@dataclass(frozen=True)
class GroupPolicy:
    """The rules a group applies (built from the channel's configuration)."""

    partition_weight: int = 10
    max_attempts: int = 3
    rebalance_threshold: int = 1
    retry_backoff_s: float = 0.05
    delay: DelayPolicy = field(default_factory=DelayPolicy)
    window: WindowPolicy = field(default_factory=WindowPolicy)


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


class ConsumerGroup:
    """Members compete for the group's partitions; each event goes to exactly one member."""

    def __init__(
        self, name: str, policy: GroupPolicy | None = None, created_offset: int = 0
    ) -> None:
        self.name = name
        self.policy = policy or GroupPolicy()
        self.created_offset = created_offset
        """The channel's next offset when the group was created: it sees events from there."""
        self.owner_changes: dict[PartitionKey, str | None] = {}
        self.held = 0
        """Events this group must still deliver: enqueued minus done or dead-lettered. The
        invariant ``held == backlog`` tells when the in-memory queues lost events."""
        self.partitions: dict[PartitionKey, PartitionQueue] = {}
        self.members: dict[str, Member] = {}
        self.touched: set[str] = set()
        """Members that may have work to send since the facade last looked (it wakes them)."""
        self.deactivations: list[tuple[str, str]] = []
        """(member, reason) of members made inactive since the facade last looked (it logs
        them)."""
        self.offloads: list[tuple[str, int]] = []
        """(member, partitions moved away) of slow members since the facade last looked."""
        self.pin_below = 0
        """Events with a lower offset were restored by a restart (see PartitionQueue)."""
        self._attempts: dict[int, int] = {}
        """Deliveries made so far of events that went back to a queue (offset -> count)."""
        self._handler_failures: dict[int, int] = {}

    # -- queries -------------------------------------------------------------------------
    @property
    def backlog(self) -> int:
        return sum(len(pq.pending) + len(pq.in_flight) for pq in self.partitions.values())

    def active_members(self) -> list[Member]:
        return [m for m in self.members.values() if m.active]

    def has_ready(self, member_id: str) -> bool:
        """Whether the member is active, has room and owns a partition ready to send."""
        member = self.members.get(member_id)
        if member is None or not member.active or not member.ready:
            return False
        return member.room > 0 or member.owed > 0

    def ready_short(self, member_id: str) -> bool:
        """Whether the member could be sent a batch now, but not a full one (less ready
        than its room): the case where lingering a moment fills the batch."""
        member = self.members.get(member_id)
        if member is None or not member.active or not member.ready:
            return False
        budget, ready = member.room, 0
        for key in member.ready:
            ready += len(self.partitions[key].pending)
            if ready >= budget:
                return False
        return True

    def ready_members(self) -> set[str]:
        return {m.member_id for m in self.members.values() if self.has_ready(m.member_id)}

    def flights_of(self, member_id: str) -> list[Flight]:
        member = self.members.get(member_id)
        return list(member.flights.values()) if member else []

    # -- events in -----------------------------------------------------------------------
    def enqueue(self, events: list[Event]) -> None:
        """Add new events (any order) to their partitions; unowned partitions get an owner."""
        self.held += len(events)
        self._fill(events)

    def lost(self) -> int:
        """Events held but in no queue: the in-memory queues were damaged (kill_queues)."""
        return self.held - self.backlog

    def drop_pending(self) -> int:
        """Empty every partition's pending queue (the fault kill_queues). Ownership and
        events in flight stay. Returns how many events were dropped."""
        dropped = 0
        for pq in self.partitions.values():
            if pq.owner is not None:
                self.members[pq.owner].queued -= len(pq.pending)
                self.members[pq.owner].owed -= pq.held_pending()  # back with the rebuild
            dropped += len(pq.pending)
            pq.pending.clear()
            self._refresh(pq)
        return dropped

    def in_flight_offsets(self) -> set[int]:
        return {ev.offset for pq in self.partitions.values() for ev in pq.in_flight}

    def refill(self, events: list[Event]) -> None:
        """Put back events that should be pending (a rebuild from the backup); ``held``
        already counts them."""
        self._fill(events)

    def _fill(self, events: Iterable[Event]) -> None:
        for key, evs in _by_key(events).items():
            pq = self.partitions.get(key)
            if pq is None:
                pq = self.partitions[key] = PartitionQueue(key)
            pq.idle_since = None
            added = pq.put_back(evs)
            if pq.owner is None:
                self.assign(pq)
            else:
                owner = self.members[pq.owner]
                owner.queued += added
                if pq.held_back:  # a rebuild brings owed events back
                    owner.owed += sum(1 for ev in evs if ev.offset in pq.held_back)
                self._refresh(pq)

    # -- ownership -----------------------------------------------------------------------
    def assign(self, pq: PartitionQueue, exclude: str | None = None) -> str | None:
        """Give an unowned partition to the least-loaded active member, if any."""
        weight = self.policy.partition_weight
        loads = {
            m.member_id: m.load(weight)
            for m in self.members.values()
            if m.active and m.member_id != exclude
        }
        if not loads:
            return None
        self.give(pq, self.members[least_loaded(loads)])
        return pq.owner

    def give(self, pq: PartitionQueue, member: Member) -> None:
        pq.owner = member.member_id
        member.partitions.add(pq.key)
        member.queued += len(pq.pending)
        self.owner_changes[pq.key] = member.member_id
        self._refresh(pq)

    def take_away(self, pq: PartitionQueue) -> None:
        """Unown a partition that has nothing in flight (its queue stays as it is)."""
        member = self.members[pq.owner]
        member.partitions.discard(pq.key)
        member.ready.pop(pq.key, None)
        member.queued -= len(pq.pending)
        member.owed -= pq.held_pending()
        pq.owner = None
        pq.release_pins()
        self.owner_changes[pq.key] = None

    def move(self, pq: PartitionQueue, member: Member) -> None:
        self.take_away(pq)
        self.give(pq, member)

    def _refresh(self, pq: PartitionQueue) -> None:
        """Keep the owner's ready set in step with the partition (after any change)."""
        owner = self.members.get(pq.owner) if pq.owner is not None else None
        if owner is None:
            return
        if pq.ready:
            if pq.key not in owner.ready:
                owner.ready[pq.key] = None
                self.touched.add(owner.member_id)
        else:
            owner.ready.pop(pq.key, None)

    def take_owner_changes(self) -> dict[PartitionKey, str | None]:
        """Ownership changed since the last call (partition -> owner, None: no owner);
        the facade persists them so a restarted broker keeps partitions where they were."""
        changes, self.owner_changes = self.owner_changes, {}
        return changes

    def restore_owner(self, key: PartitionKey, owner: str) -> None:
        """Give a partition back to the member that owned it before a restart."""
        member = self.members.get(owner)
        if member is None or not member.active:
            return
        pq = self.partitions.get(key)
        if pq is None:
            pq = self.partitions[key] = PartitionQueue(key)
        if pq.owner is None:
            self.give(pq, member)

    def pin_restored(self, below_offset: int) -> None:
        """After a restart's events are back: each owned partition stays with its owner
        until the events restored into it are resolved (see PartitionQueue.pinned)."""
        self.pin_below = below_offset
        for pq in self.partitions.values():
            if pq.owner is not None:
                pq.pinned = len(pq.pending)

    def assign_unowned(self) -> None:
        """Give every unowned partition with work an owner, oldest work first."""
        waiting = [pq for pq in self.partitions.values() if pq.owner is None and pq.pending]
        waiting.sort(key=lambda pq: pq.pending[0])
        for pq in waiting:
            if self.assign(pq) is None:
                return

    # -- membership ----------------------------------------------------------------------
    def join(
        self,
        member_id: str,
        callback: str,
        prefetch: int,
        session: int,
        now: float,
        pull: bool = False,
    ) -> Member:
        """Add a member, or resume one with the same id (a durable subscription) in a new
        session: what its old session held goes back first (a resumed member that was
        active keeps its partitions, so it gets those events again, in order)."""
        member = self.members.get(member_id)
        if member is None:
            member = Member(
                member_id,
                callback,
                prefetch,
                delays=DelayTracker(self.policy.delay),
                window=Window(prefetch, self.policy.window),
            )
            self.members[member_id] = member
        else:
            self._unfly(member, list(member.flights.values()))
            pace = member.window.per_event_s
            member.callback, member.prefetch = callback, prefetch
            member.window = Window(prefetch, self.policy.window)
            member.window.per_event_s = pace
            member.active, member.inactive_reason = True, ""
            member.transport_failures = member.ack_failures = 0
            member.offloaded, member.retry_at = False, 0.0
        member.session, member.pull, member.next_seq = session, pull, 1
        member.seen(now)
        self.assign_unowned()
        rebalance.rebalance_to(self, member)
        self.touched.add(member_id)
        return member

    def deactivate(self, member_id: str, reason: str) -> None:
        """Take a member out of rotation (declared dead); what it held and its partitions
        move to the least-loaded others, in order. It comes back by joining again."""
        member = self.members[member_id]
        member.active, member.inactive_reason = False, reason
        self.deactivations.append((member_id, reason))
        self._unfly(member, list(member.flights.values()))
        self._release_partitions(member)

    def leave(self, member_id: str) -> None:
        """Unsubscribe: the member stopped processing, so what it held goes back to the
        head of its partitions at once, and the partitions to the others."""
        member = self.members[member_id]
        member.active = False
        self._unfly(member, list(member.flights.values()))
        self._release_partitions(member)
        del self.members[member_id]

    def forget(self, member_id: str) -> None:
        """Remove an inactive member for good (it holds nothing and owns nothing)."""
        member = self.members[member_id]
        if member.active:
            raise ValueError(f"{member_id} is active")
        del self.members[member_id]

    def _release_partitions(self, member: Member) -> None:
        for key in sorted(member.partitions, key=str):
            self.take_away(self.partitions[key])
        self.assign_unowned()

    # -- delivery ------------------------------------------------------------------------
    def take_batch(self, member_id: str, now: float) -> Batch | None:
        """The next push for a member: its ready partitions, round robin, up to its room."""
        member = self.members.get(member_id)
        if member is None or not member.active or now < member.retry_at:
            return None
        budget = member.room
        events: list[Event] = []
        for key in list(member.ready):
            if budget <= 0 and not member.owed:
                break
            taken, fresh = self.partitions[key].take(budget)
            if not taken:
                continue
            del member.ready[key]
            member.owed -= len(taken) - fresh
            events.extend(taken)
            budget -= fresh
        return self._launch(member, events, now) if events else None

    def take_event(self, member_id: str, event_id: str, now: float) -> Batch | None:
        """A one-event batch of ``event_id`` when it is next in one of the member's
        partitions (a pull client acknowledging what it got before a restart)."""
        member = self.members.get(member_id)
        if member is None:
            return None
        for key in list(member.ready):
            pq = self.partitions[key]
            if pq.pending[0].id == event_id:
                del member.ready[key]
                taken, fresh = pq.take(1)
                member.owed -= len(taken) - fresh
                return self._launch(member, taken, now)
        return None

    def _launch(self, member: Member, events: list[Event], now: float) -> Batch:
        """Account events taken from the member's partitions as held by it."""
        if not member.flights:
            member.busy_since = now
        attempts = [self._attempts.pop(ev.offset, 0) + 1 for ev in events]
        first = member.next_seq
        for i, (ev, attempt) in enumerate(zip(events, attempts, strict=True)):
            member.flights[ev.id] = Flight(ev, attempt, first + i, now)
        member.next_seq += len(events)
        member.queued -= len(events)
        member.delivered += len(events)
        return Batch(self.name, member.member_id, member.session, first, events, attempts)

    def _current(self, member_id: str, session: int) -> Member | None:
        """The member if it is active in that session (else the message is stale)."""
        member = self.members.get(member_id)
        if member is None or member.session != session or not member.active:
            return None
        return member

    def delivered(self, batch: Batch, now: float) -> bool:
        """A push was answered. False when the batch is stale (its events moved on)."""
        member = self._current(batch.member_id, batch.session)
        if member is None:
            return False
        member.seen(now)
        member.transport_failures = 0
        return True

    def push_failed(self, batch: Batch, now: float) -> bool:
        """A push failed in transport: its events go back; the member retries after a
        back-off. Returns True when this failure made the member inactive."""
        member = self._current(batch.member_id, batch.session)
        if member is None:
            return False
        last = batch.first_seq + len(batch.events)
        back = [f for f in member.flights.values() if batch.first_seq <= f.seq < last]
        self._unfly(member, back)
        return self._transport_failure(member, now, f"{len(batch.events)}-event push failed")

    def probe_failed(self, member_id: str, now: float) -> bool:
        """A silent member did not answer a ping. True when it is now inactive."""
        member = self.members.get(member_id)
        if member is None or not member.active:
            return False
        return self._transport_failure(member, now, "no answer to pings")

    def probe_answered(self, member_id: str, now: float) -> None:
        member = self.members.get(member_id)
        if member is not None:
            member.seen(now)
            member.transport_failures = 0

    def _transport_failure(self, member: Member, now: float, what: str) -> bool:
        member.failures += 1
        member.transport_failures += 1
        failures = member.transport_failures
        if failures >= self.policy.max_attempts:
            self.deactivate(member.member_id, f"{what}, {failures} failures in a row")
            return True
        member.retry_at = now + self.policy.retry_backoff_s * 2 ** (failures - 1)
        return False

    # -- acks ----------------------------------------------------------------------------
    def acknowledge(
        self,
        member_id: str,
        session: int,
        acked: Iterable[str],
        nacked: dict[str, str],
        through_seq: int,
        now: float,
    ) -> AckOutcome:
        """Apply an ack message: acked ids are done; nacked ones are retried or, after
        ``max_attempts`` handler failures, dead; events delivered up to ``through_seq``
        that it names neither way were skipped (a lost ack) and go back, counting as a
        failed attempt of the member."""
        member = self._current(member_id, session)
        if member is None:
            return self._stale_acks(member_id, acked)
        member.seen(now)
        outcome = AckOutcome()
        busy_since = member.busy_since
        finished: list[Event] = []
        failed: list[Flight] = []
        elsewhere: list[str] = []
        for event_id in acked:
            flight = member.flights.pop(event_id, None)
            if flight is not None:
                self._handler_failures.pop(flight.event.offset, None)
                outcome.done.append(flight.event)
                finished.append(flight.event)
            else:
                elsewhere.append(event_id)
        for event_id, error in nacked.items():
            flight = member.flights.pop(event_id, None)
            if flight is None:
                continue
            if self._handler_failed(flight.event):
                outcome.dead.append((flight.event, error))
                finished.append(flight.event)
            else:
                failed.append(flight)
        skipped = [f for f in member.flights.values() if f.seq <= through_seq]
        outcome.missing = len(skipped)
        for flight in skipped:
            del member.flights[flight.event.id]
        outcome.retried = [f.event for f in failed + skipped]
        outcome.done.extend(self._ack_owed(member, elsewhere))
        member.acked += len(outcome.done)
        self._finish(member, finished)
        self._return(member, failed, hold=False)  # the handler failed: anyone may retry
        self._return(member, skipped)  # processed, maybe: they stay with the member
        completed = len(finished) + len(failed)
        if busy_since is not None:
            member.window.observe(completed, now - busy_since)
        member.busy_since = now if member.flights else None
        outcome.deactivated = self._count_acks(member, outcome.missing, completed)
        if member.active and member.ready:
            self.touched.add(member_id)  # it has room again for what was waiting
        return outcome

    def _stale_acks(self, member_id: str, acked: Iterable[str]) -> AckOutcome:
        """Acks of an ended session (a broker restart, or a resubscribe) still say what
        the member processed: what it holds again in its new session is done, and so is
        what ``_ack_owed`` finds; nothing else of them counts."""
        outcome = AckOutcome(stale=True)
        member = self.members.get(member_id)
        if member is None or not member.active:
            return outcome
        rest = []
        for event_id in acked:
            flight = member.flights.pop(event_id, None)
            if flight is None:
                rest.append(event_id)
            else:
                self._handler_failures.pop(flight.event.offset, None)
                outcome.done.append(flight.event)
        owed = self._ack_owed(member, rest)
        self._finish(member, list(outcome.done))
        outcome.done.extend(owed)
        member.acked += len(outcome.done)
        if not member.flights:
            member.busy_since = None
        return outcome

    def _ack_owed(self, member: Member, acked: Iterable[str]) -> list[Event]:
        """Acked ids the member does not hold may name events waiting in its partitions
        that it processed already (restored after a restart, or back after a lost ack):
        those are done now, instead of going to someone else when the partition moves."""
        wanted = set(acked)
        found: list[Event] = []
        for key in list(member.partitions):
            pq = self.partitions[key]
            if not wanted or not (pq.pinned or pq.held_back):
                continue
            done = [ev for ev in pq.pending if ev.id in wanted]
            for ev in done:
                pq.pending.remove(ev)
                self._handler_failures.pop(ev.offset, None)
            member.queued -= len(done)
            member.owed -= sum(1 for ev in done if ev.offset in pq.held_back)
            wanted.difference_update(ev.id for ev in done)
            self._unpin(pq, done)
            self._refresh(pq)
            found.extend(done)
        self.held -= len(found)
        return found

    def _handler_failed(self, event: Event) -> bool:
        """One more handler failure of an event; True when it should be dead-lettered."""
        failures = self._handler_failures.get(event.offset, 0) + 1
        if failures >= self.policy.max_attempts:
            self._handler_failures.pop(event.offset, None)
            return True
        self._handler_failures[event.offset] = failures
        return False

    def _count_acks(self, member: Member, missing: int, completed: int) -> bool:
        if not missing:
            if completed:
                member.ack_failures = 0
            return False
        member.failures += 1
        member.ack_failures += 1
        if member.ack_failures >= self.policy.max_attempts:
            self.deactivate(member.member_id, f"acks missing {member.ack_failures} times in a row")
            return True
        return False

    def _finish(self, member: Member, events: list[Event]) -> None:
        """Events done (acked or dead) in this group: out of their partitions for good."""
        self.held -= len(events)
        for key, done in _by_key(events).items():
            pq = self.partitions[key]
            pq.resolve(done)
            self._unpin(pq, done)
            self._refresh(pq)
        if events:
            rebalance.after_progress(self, member)

    def _unpin(self, pq: PartitionQueue, resolved: list[Event]) -> None:
        if pq.pinned:
            pq.pinned = max(0, pq.pinned - sum(ev.offset < self.pin_below for ev in resolved))
        if pq.held_back:
            pq.held_back.difference_update(ev.offset for ev in resolved)

    def _unfly(self, member: Member, flights: list[Flight]) -> None:
        for flight in flights:
            member.flights.pop(flight.event.id, None)
        self._return(member, flights)
        if not member.flights:
            member.busy_since = None

    def _return(self, member: Member, flights: list[Flight], hold: bool = True) -> None:
        """Put events that were held back at their place in their partitions; their next
        delivery counts as the next attempt. ``hold``: the member may have processed them
        (a skipped ack, a failed push): they stay with it (PartitionQueue.held_back)."""
        for flight in flights:
            self._attempts[flight.event.offset] = flight.attempt
        for key, events in _by_key(f.event for f in flights).items():
            pq = self.partitions[key]
            pq.resolve(events)
            if hold and pq.owner == member.member_id:
                pq.held_back.update(ev.offset for ev in events)
                member.owed += len(events)
            else:
                pq.held_back.difference_update(ev.offset for ev in events)
            added = pq.put_back(events)
            if pq.owner is not None:
                self.members[pq.owner].queued += added
            self._refresh(pq)

    # -- liveness ------------------------------------------------------------------------
    def heartbeat(self, member_id: str, now: float) -> Member | None:
        member = self.members.get(member_id)
        if member is not None:
            member.seen(now)
        return member

    def silent(self, now: float, after_s: float) -> list[str]:
        """Active push members holding events that gave no sign of life for ``after_s``:
        frozen, or gone. They are pinged (delivery is judged, not the handlers)."""
        return [
            m.member_id
            for m in self.members.values()
            if m.active and not m.pull and m.flights and now - m.last_seen > after_s
        ]

    def stuck(self, now: float, after_s: float) -> list[str]:
        """Active members holding an event longer than the handler timeout."""
        return [
            m.member_id
            for m in self.members.values()
            if m.active and m.flights and now - next(iter(m.flights.values())).sent_at > after_s
        ]

    def idle_pullers(self, now: float, after_s: float) -> list[str]:
        """Active pull members that have not called ``get`` for ``after_s``."""
        return [
            m.member_id
            for m in self.members.values()
            if m.active and m.pull and now - m.last_seen > after_s
        ]

    def sweep_idle(self, now: float, idle_s: float) -> list[PartitionKey]:
        """Drop partitions that stayed empty with nothing in flight for ``idle_s``."""
        dropped = []
        for key, pq in list(self.partitions.items()):
            if not pq.idle:
                pq.idle_since = None
                continue
            if pq.idle_since is None:
                pq.idle_since = now
            elif now - pq.idle_since >= idle_s:
                if pq.owner is not None and pq.owner in self.members:
                    self.members[pq.owner].partitions.discard(key)
                del self.partitions[key]
                self.owner_changes[key] = None
                dropped.append(key)
        return dropped


def _by_key(events: Iterable[Event]) -> dict[PartitionKey, list[Event]]:
    """Events grouped by partition, in the order given."""
    by_key: dict[PartitionKey, list[Event]] = {}
    for ev in events:
        by_key.setdefault(ev.key, []).append(ev)
    return by_key
