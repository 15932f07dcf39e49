"""One consumer group: its members, partition ownership, batches in flight and acks.

Pure bookkeeping (DESIGN §4-§6): no clock reads, no threads, no I/O. The channel facade
holds the lock and performs the pushes; this class decides what to push, to whom, and what
an ack or a failure changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from channel_server.core.assignment import least_loaded
from channel_server.core.health import DelayPolicy, DelayTracker
from channel_server.core.queues import PartitionQueue
from channel_server.events import Event, PartitionKey


@dataclass
class Member:
    """A subscriber in a group. ``queued`` counts pending events of owned partitions."""

    member_id: str
    callback: str
    prefetch: int
    active: bool = True
    leaving: bool = False
    session: int = 1
    partitions: set[PartitionKey] = field(default_factory=set)
    queued: int = 0
    in_flight: int = 0
    consecutive_failures: int = 0
    delivered: int = 0
    acked: int = 0
    failures: int = 0
    delays: DelayTracker = field(default_factory=lambda: DelayTracker(DelayPolicy()))
    offloaded: bool = False
    """Its queued work was moved away for slowness; no rebalance hands it more until a
    push of its is fast again (or it rejoins)."""

    def load(self, partition_weight: int) -> int:
        return partition_weight * len(self.partitions) + self.queued + self.in_flight


@dataclass
class Batch:
    """Events pushed to one member in one call, grouped partition by partition."""

    member_id: str
    session: int
    events: list[Event]
    attempts: list[int]

    def to_wire(self) -> list[dict]:
        return [ev.to_dict(att) for ev, att in zip(self.events, self.attempts, strict=True)]


@dataclass
class AckOutcome:
    """What a reply did: events now done in this group, put back, or dead-lettered."""

    done: list[Event] = field(default_factory=list)
    retried: list[Event] = field(default_factory=list)
    dead: list[tuple[Event, str]] = field(default_factory=list)
    missing: int = 0
    deactivated: bool = False
    """The reply's missing acks were the member's ``max_attempts``-th failure in a row."""


class ConsumerGroup:
    """Members compete for the group's partitions; each event goes to exactly one member."""

    def __init__(
        self,
        name: str,
        partition_weight: int,
        max_attempts: int,
        delay_policy: DelayPolicy | None = None,
        rebalance_threshold: int = 1,
        created_offset: int = 0,
    ) -> None:
        self.name = name
        self.partition_weight = partition_weight
        self.max_attempts = max_attempts
        self.delay_policy = delay_policy or DelayPolicy()
        self.rebalance_threshold = rebalance_threshold
        """A joining member takes idle partitions while a donor owns more than this many
        partitions above it."""
        self.created_offset = created_offset
        """The channel's next offset when the group was created: it sees events from there."""
        self.owner_changes: dict[PartitionKey, str | None] = {}
        self.held = 0
        """Events this group must still deliver: enqueued minus done or dead-lettered. The
        invariant ``held == backlog`` tells when the in-memory queues lost events."""
        self.partitions: dict[PartitionKey, PartitionQueue] = {}
        self.members: dict[str, Member] = {}
        self._attempts: dict[int, int] = {}
        """Deliveries made so far of events that went back to a queue (offset -> count)."""
        self._handler_failures: dict[int, int] = {}
        self._rotation = 0

    # -- queries -------------------------------------------------------------------------
    @property
    def backlog(self) -> int:
        return sum(len(pq.pending) + len(pq.in_flight) for pq in self.partitions.values())

    def active_members(self) -> list[Member]:
        return [m for m in self.members.values() if m.active]

    def has_ready(self, member_id: str) -> bool:
        """Whether the member is active and owns a partition ready to send."""
        member = self.members.get(member_id)
        if member is None or not member.active or member.in_flight >= member.prefetch:
            return False
        return any(self.partitions[key].ready for key in member.partitions)

    def ready_short(self, member_id: str) -> bool:
        """Whether the member could be sent a batch now, but not a full one (less ready
        than its free prefetch): the case where lingering a moment fills the batch."""
        member = self.members.get(member_id)
        if member is None or not member.active:
            return False
        budget = member.prefetch - member.in_flight
        ready = 0
        for key in member.partitions:
            pq = self.partitions[key]
            if pq.ready:
                ready += len(pq.pending)
                if ready >= budget:
                    return False
        return ready > 0

    def ready_members(self) -> set[str]:
        """Members that have a partition ready to send."""
        return {
            pq.owner
            for pq in self.partitions.values()
            if pq.owner is not None and pq.ready and self.members[pq.owner].active
        }

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
        batches in flight stay. Returns how many events were dropped."""
        dropped = 0
        for pq in self.partitions.values():
            if pq.owner is not None:
                self.members[pq.owner].queued -= len(pq.pending)
            dropped += len(pq.pending)
            pq.pending.clear()
        return dropped

    def in_flight_offsets(self) -> set[int]:
        return {ev.offset for pq in self.partitions.values() for ev in pq.in_flight}

    def refill(self, events: list[Event]) -> None:
        """Put back events that should be pending (a rebuild from the backup); ``held``
        already counts them."""
        self._fill(events)

    def _fill(self, events: Iterable[Event]) -> None:
        by_key: dict[PartitionKey, list[Event]] = {}
        for ev in events:
            by_key.setdefault(ev.key, []).append(ev)
        for key, evs in by_key.items():
            pq = self.partitions.get(key)
            if pq is None:
                pq = self.partitions[key] = PartitionQueue(key)
            pq.idle_since = None
            added = pq.put_back(evs)
            if pq.owner is None:
                self._assign(pq)
            else:
                self.members[pq.owner].queued += added

    def _assign(self, pq: PartitionQueue, exclude: str | None = None) -> str | None:
        """Give an unowned partition to the least-loaded active member, if any."""
        loads = {
            m.member_id: m.load(self.partition_weight)
            for m in self.members.values()
            if m.active and m.member_id != exclude
        }
        if not loads:
            return None
        self._give(pq, self.members[least_loaded(loads)])
        return pq.owner

    def _give(self, pq: PartitionQueue, member: Member) -> None:
        pq.owner = member.member_id
        member.partitions.add(pq.key)
        member.queued += len(pq.pending)
        self.owner_changes[pq.key] = member.member_id

    def _take_away(self, pq: PartitionQueue) -> None:
        """Unown a partition that has nothing in flight (its queue stays as it is)."""
        member = self.members[pq.owner]
        member.partitions.discard(pq.key)
        member.queued -= len(pq.pending)
        pq.owner = None
        self.owner_changes[pq.key] = None

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
            self._give(pq, member)

    def assign_unowned(self) -> None:
        """Give every unowned partition with work an owner, oldest work first."""
        waiting = [pq for pq in self.partitions.values() if pq.owner is None and pq.pending]
        waiting.sort(key=lambda pq: pq.pending[0])
        for pq in waiting:
            if self._assign(pq) is None:
                return

    # -- membership ----------------------------------------------------------------------
    def join(self, member_id: str, callback: str, prefetch: int) -> Member:
        """Add a member, or resume one with the same id (a durable subscription)."""
        member = self.members.get(member_id)
        if member is None:
            member = Member(member_id, callback, prefetch, delays=DelayTracker(self.delay_policy))
            self.members[member_id] = member
        else:
            member.callback, member.prefetch = callback, prefetch
            member.active, member.leaving = True, False
            member.session += 1
            member.consecutive_failures = 0
            member.offloaded = False
        self.assign_unowned()
        self.rebalance_to(member)
        return member

    def rebalance_to(self, newcomer: Member) -> list[PartitionKey]:
        """Move idle partitions (nothing in flight) from the busiest members to a joining
        one until no donor is more than ``rebalance_threshold`` partitions ahead of it.
        A moved partition keeps its queue, so no batch is split and nothing is reordered."""
        moved: list[PartitionKey] = []
        donors = {m.member_id: m for m in self.active_members() if m is not newcomer}
        while donors:
            donor = max(donors.values(), key=lambda m: (len(m.partitions), m.member_id))
            if len(donor.partitions) - len(newcomer.partitions) <= self.rebalance_threshold:
                break
            idle = [
                self.partitions[k] for k in donor.partitions if not self.partitions[k].in_flight
            ]
            if not idle:
                del donors[donor.member_id]
                continue
            pq = min(idle, key=lambda q: str(q.key))
            self._take_away(pq)
            self._give(pq, newcomer)
            moved.append(pq.key)
        return moved

    def rebalance(self) -> list[PartitionKey]:
        """Carry on a join's rebalance once partitions have become idle: the active member
        owning the fewest partitions takes idle ones from the busiest (see rebalance_to)."""
        active = self.active_members()
        takers = [m for m in active if not m.offloaded]
        if len(active) < 2 or not takers:
            return []
        return self.rebalance_to(min(takers, key=lambda m: (len(m.partitions), m.member_id)))

    def offload(self, member_id: str) -> list[PartitionKey]:
        """Move a slow member's queued partitions that have nothing in flight to the
        least-loaded others; the member stays active (DESIGN §6, long delays)."""
        member = self.members[member_id]
        member.offloaded = True
        waiting = [
            self.partitions[k]
            for k in member.partitions
            if self.partitions[k].pending and not self.partitions[k].in_flight
        ]
        moved = []
        for pq in sorted(waiting, key=lambda q: q.pending[0]):
            self._take_away(pq)
            if self._assign(pq, exclude=member_id) is None:
                self._give(pq, member)  # nobody else is active: keep it
                break
            moved.append(pq.key)
        return moved

    def deactivate(self, member_id: str) -> None:
        """Take a member out of rotation; the unacknowledged rest of its partitions moves."""
        member = self.members[member_id]
        member.active = False
        self._release_partitions(member)

    def leave(self, member_id: str) -> bool:
        """Unsubscribe. Returns True when the member is gone now, False when it still has a
        batch in flight (it goes when that batch completes or fails)."""
        member = self.members[member_id]
        member.leaving = True
        member.active = False
        self._release_partitions(member)  # those in flight go when their batch resolves
        if member.in_flight:
            return False
        del self.members[member_id]
        return True

    def _release_partitions(self, member: Member) -> None:
        for key in sorted(member.partitions, key=str):
            pq = self.partitions[key]
            if not pq.in_flight:  # one in flight stays ours until its batch resolves
                self._take_away(pq)
        self.assign_unowned()

    def take_event(self, member_id: str, event_id: str) -> Batch | None:
        """A one-event batch of ``event_id`` when it is next in one of the member's
        partitions (a pull client acknowledging what it got before a broker restart)."""
        member = self.members.get(member_id)
        if member is None:
            return None
        for key in member.partitions:
            pq = self.partitions[key]
            if pq.ready and pq.pending[0].id == event_id:
                return self._launch(member, pq.take(1))
        return None

    def _launch(self, member: Member, events: list[Event]) -> Batch:
        """Account a batch taken from the member's partitions as in flight."""
        member.queued -= len(events)
        member.in_flight += len(events)
        member.delivered += len(events)
        attempts = [self._attempts.pop(ev.offset, 0) + 1 for ev in events]
        return Batch(member.member_id, member.session, events, attempts)

    # -- dispatch ------------------------------------------------------------------------
    def take_batch(self, member_id: str) -> Batch | None:
        """The next push for a member: ready partitions, up to its free prefetch."""
        member = self.members.get(member_id)
        if member is None or not member.active:
            return None
        budget = member.prefetch - member.in_flight
        keys = sorted(member.partitions, key=str)
        if not keys or budget <= 0:
            return None
        start = self._rotation % len(keys)
        self._rotation += 1
        events: list[Event] = []
        for key in keys[start:] + keys[:start]:
            pq = self.partitions[key]
            if budget <= 0:
                break
            if pq.ready:
                taken = pq.take(budget)
                events.extend(taken)
                budget -= len(taken)
        return self._launch(member, events) if events else None

    def complete(self, batch: Batch, acked: set[str], nacked: dict[str, str]) -> AckOutcome:
        """Apply a member's reply: acked ids are done, nacked ones are retried or
        dead-lettered, ids in neither are redelivered and count as a failed attempt."""
        outcome = AckOutcome()
        for ev, attempt in zip(batch.events, batch.attempts, strict=True):
            if ev.id in acked:
                self._handler_failures.pop(ev.offset, None)
                outcome.done.append(ev)
            elif ev.id in nacked:
                failures = self._handler_failures.get(ev.offset, 0) + 1
                if failures >= self.max_attempts:
                    self._handler_failures.pop(ev.offset, None)
                    outcome.dead.append((ev, str(nacked[ev.id])))
                else:
                    self._handler_failures[ev.offset] = failures
                    self._attempts[ev.offset] = attempt
                    outcome.retried.append(ev)
            else:
                self._attempts[ev.offset] = attempt
                outcome.retried.append(ev)
                outcome.missing += 1
        self.held -= len(outcome.done) + len(outcome.dead)
        member = self.members[batch.member_id]
        member.acked += len(outcome.done)
        if outcome.missing:
            outcome.deactivated = self._count_failure(member)
        else:
            member.consecutive_failures = 0
        self._settle(batch, outcome.retried)
        return outcome

    def fail(self, batch: Batch) -> bool:
        """A push failed in transport: everything goes back. Returns True when the member
        has now failed ``max_attempts`` times in a row and was made inactive."""
        for ev, attempt in zip(batch.events, batch.attempts, strict=True):
            self._attempts[ev.offset] = attempt
        member = self.members[batch.member_id]
        gave_up = self._count_failure(member)
        self._settle(batch, batch.events)
        return gave_up

    def _count_failure(self, member: Member) -> bool:
        """One more failed attempt; the ``max_attempts``-th in a row makes it inactive."""
        member.failures += 1
        member.consecutive_failures += 1
        if member.active and member.consecutive_failures >= self.max_attempts:
            self.deactivate(member.member_id)
            return True
        return False

    def _settle(self, batch: Batch, put_back: list[Event]) -> None:
        """Close the batch's partitions: clear in-flight, return what must be redelivered."""
        member = self.members[batch.member_id]
        member.in_flight -= len(batch.events)
        back: dict[PartitionKey, list[Event]] = {}
        for ev in put_back:
            back.setdefault(ev.key, []).append(ev)
        for key in {ev.key for ev in batch.events}:
            pq = self.partitions[key]
            pq.in_flight = []
            member.queued += pq.put_back(back.get(key, ()))
            if not member.active:  # it was kept only for the batch in flight: release it
                self._take_away(pq)
        if member.leaving and not member.in_flight:
            del self.members[member.member_id]
        self.assign_unowned()

    # -- housekeeping --------------------------------------------------------------------
    def sweep_idle(self, now: float, idle_s: float) -> list[PartitionKey]:
        """Drop partitions that stayed empty with nothing in flight for ``idle_s``."""
        dropped = []
        for key, pq in list(self.partitions.items()):
            if not pq.idle:
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
