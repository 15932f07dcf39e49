"""One consumer group: its members, partition ownership, events held and acks.

Pure bookkeeping (DESIGN §4-§6): no clock reads, no threads, no I/O. The channel facade
holds the lock, performs the pushes and passes ``now`` in; this class decides what to push,
to whom, and what a delivery, an ack, a failure or a silence changes. The state lives here;
handing events out is :mod:`~channel_server.core.delivery`, what acks do is
:mod:`~channel_server.core.acks`, and where partitions move is
:mod:`~channel_server.core.rebalance`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from channel_server.core import acks, delivery, group_membership, poison
from channel_server.core.acks import AckOutcome
from channel_server.core.assignment import LeastLoaded
from channel_server.core.delivery import by_key
from channel_server.core.health import DelayPolicy
from channel_server.core.histogram import LATENCY_BUCKETS_S, Histogram
from channel_server.core.member import Batch, Flight, Member, WindowPolicy
from channel_server.core.queues import PartitionQueue, QueueCount, Warm, warm_nothing
from channel_server.events import Event, PartitionKey

__all__ = ["AckOutcome", "ConsumerGroup", "GroupPolicy", "OwnerChanges"]


class OwnerChanges(NamedTuple):
    """Ownership changed since it was last taken, for the facade to persist."""

    owners: dict[PartitionKey, str | None]
    """partition -> its owner now (None: it has none)"""
    opened: bool
    """Every change gives its first owner to a partition a publish opened since: none of
    their events was ever handed out, so no deferred ack can be about them and the store
    need not write those first (see :meth:`Store.save_owners
    <channel_server.store.base.Store.save_owners>`)."""


@dataclass(frozen=True)
class GroupPolicy:
    """The rules a group applies (built from the channel's configuration)."""

    partition_weight: int = 10
    max_attempts: int = 3
    rebalance_threshold: int = 1
    retry_backoff_s: float = 0.05
    delay: DelayPolicy = field(default_factory=DelayPolicy)
    window: WindowPolicy = field(default_factory=WindowPolicy)
    max_crashes: int = 5
    """Deaths of subscribers holding an event alone before it is dead-lettered (0:
    never; see :mod:`~channel_server.core.poison`)."""


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
        self._opened: set[PartitionKey] = set()
        """Partitions a publish opened since the owner changes were last taken, none of
        whose changes was waiting then (a partition dropped idle and opened again before
        its drop was persisted is not new to the store)."""
        self.held = 0
        """Events this group must still deliver: enqueued minus done or dead-lettered. The
        invariant ``held == backlog`` tells when the in-memory queues lost events."""
        self._queued = QueueCount()
        """Events in the partitions, kept by each of them (what ``backlog`` reads)."""
        self.partitions: dict[PartitionKey, PartitionQueue] = {}
        self._changed: dict[PartitionKey, None] = {}
        """Partitions changed since the last idle sweep: the only ones it classifies."""
        self._idle: dict[PartitionKey, None] = {}
        """Idle partitions waiting to be dropped, in the order their idle clocks started
        (``PartitionQueue.idle_since``): the sweep reads only those due, so partitions
        that wait cost nothing per round."""
        self.members: dict[str, Member] = {}
        self.touched: set[str] = set()
        """Members that may have work to send since the facade last looked (it wakes them)."""
        self.deactivations: list[tuple[str, str]] = []
        """(member, reason) of members made inactive since the facade last looked (it logs
        them)."""
        self.offloads: list[tuple[str, int, str]] = []
        """(member, partitions moved away, why: slow or leaving) since the facade last
        looked (it logs them)."""
        self.rebalancing = False
        """A join (or a member fast again after an offload) asked for partitions that
        were busy: progress moves them as they become movable (see rebalance)."""
        self.pin_below = 0
        """Events with a lower offset were restored by a restart (see PartitionQueue)."""
        self.attempts: dict[int, int] = {}
        """Deliveries made so far of events that went back to a queue (offset -> count)."""
        self.handler_failures: dict[int, int] = {}
        """Handler failures so far of events not yet dead-lettered (offset -> count)."""
        self.suspects: dict[int, int] = {}
        """Events suspected of killing their subscribers (offset -> deaths counted while
        held alone): they go out alone (see :mod:`~channel_server.core.poison`)."""
        self.nacked = self.redelivered = self.dead_lettered = 0
        """Totals of this life: handler failures reported, deliveries after the first
        (attempt > 1), events given up on (the dead-letter queue)."""
        self.ack_latency = Histogram(LATENCY_BUCKETS_S)
        """Seconds from acceptance to this group's ack (events accepted in this life)."""
        self.warm: Warm = warm_nothing
        """Gives cold events their payloads back as they are taken (the channel's
        :class:`~channel_server.core.spill.PayloadSpill` sets it)."""

    # -- queries -------------------------------------------------------------------------
    @property
    def backlog(self) -> int:
        """Events in the partitions, pending and in flight: a counter the partitions keep
        as they change, so the invariant costs O(1) (:meth:`counted_backlog` counts)."""
        return self._queued.events

    @property
    def in_flight(self) -> int:
        """Of the backlog, the events in flight (a counter, like ``backlog``)."""
        return self._queued.in_flight

    def holding(self) -> list[PartitionQueue]:
        """The partitions holding any event, pending or in flight: O(their number), however
        many idle ones wait to be dropped."""
        found = (self.partitions.get(key) for key in self._queued.holding)
        return [pq for pq in found if pq is not None]

    def counted_backlog(self) -> int:
        """``backlog`` counted partition by partition: what the counter must equal (the
        channel's invariant check and the tests compare them)."""
        return sum(len(pq.pending) + len(pq.in_flight) for pq in self.partitions.values())

    def active_members(self) -> list[Member]:
        return [m for m in self.members.values() if m.active]

    def has_ready(self, member_id: str) -> bool:
        """Whether the member is active and :meth:`take_batch` has something for it: a
        ready partition and room, or a ready partition holding events it owes (sent
        whatever its room). A member may owe events of a partition still in flight: that
        partition is not ready, and another's events need room (the push loop asked
        again at once, for as long as the flights lasted)."""
        member = self.members.get(member_id)
        if member is None or not member.active or not member.ready:
            return False
        if self.suspects and poison.ready_suspect(self, member) is not None:
            return not member.flights  # a suspect goes alone, to a member holding nothing
        if member.room > 0:
            return True
        return member.owed > 0 and any(self.partitions[key].held_back for key in member.ready)

    def shortfall(self, member_id: str) -> tuple[int, int] | None:
        """``(ready, room)`` when the member could be sent a batch now, but not a full one
        (fewer events ready than its room): the case where lingering a moment fills the
        batch. None otherwise."""
        member = self.members.get(member_id)
        if member is None or not member.active or not member.ready:
            return None
        if self.suspects and poison.ready_suspect(self, member) is not None:
            return None  # it goes alone: nothing to fill
        budget, ready = member.room, 0
        if len(member.ready) >= budget:
            return None  # a ready partition holds an event at least: no need to count
        for key in member.ready:
            ready += len(self.partitions[key].pending)
            if ready >= budget:
                return None
        return ready, budget

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
            dropped += pq.drop_pending()
            self.refresh(pq)
        return dropped

    def in_flight_offsets(self) -> set[int]:
        return {ev.offset for pq in self.partitions.values() for ev in pq.in_flight}

    def refill(self, events: list[Event]) -> None:
        """Put back events that should be pending (a rebuild from the backup); ``held``
        already counts them."""
        self._fill(events)

    def _fill(self, events: Iterable[Event]) -> None:
        book: LeastLoaded[Member] | None = None  # made for the first partition without owner
        owned: list[PartitionQueue] = []
        for key, evs in by_key(events).items():
            pq = self.partitions.get(key)
            if pq is None:
                pq = self.partitions[key] = PartitionQueue(key, self._queued)
                if key not in self.owner_changes:
                    self._opened.add(key)
            pq.idle_since = None
            added = pq.put_back(evs)
            if pq.owner is None:
                if book is None:
                    book = self.loads()
                self.assign(pq, book=book)
            else:
                owner = self.members[pq.owner]
                owner.queued += added
                if book is not None:
                    book.changed(owner)
                if pq.held_back:  # a rebuild brings owed events back
                    owner.owed += sum(1 for ev in evs if ev.offset in pq.held_back)
                owned.append(pq)
        self.refresh_many(owned)

    # -- ownership -----------------------------------------------------------------------
    def loads(self, exclude: str | None = None) -> LeastLoaded[Member]:
        """The active members' loads (but ``exclude``'s), to hand out several partitions
        in a row: each :meth:`assign` given it reports the change it makes; any other
        change of their loads meanwhile must be reported too (``changed``)."""
        active = (m for m in self.members.values() if m.active and m.member_id != exclude)
        return LeastLoaded(active, self.policy.partition_weight)

    def assign(self, pq: PartitionQueue, book: LeastLoaded[Member] | None = None) -> str | None:
        """Give an unowned partition to the least-loaded active member, if any; ``book``:
        the loads of several assignments in a row (see :meth:`loads`)."""
        book = self.loads() if book is None else book
        member = book.least()
        if member is None:
            return None
        self.give(pq, member)
        book.changed(member)
        return pq.owner

    def give(self, pq: PartitionQueue, member: Member) -> None:
        pq.owner = member.member_id
        member.partitions[pq.key] = None
        member.queued += len(pq.pending)
        self.owner_changes[pq.key] = member.member_id
        self.refresh(pq)

    def take_away(self, pq: PartitionQueue) -> None:
        """Unown a partition that has nothing in flight (its queue stays as it is)."""
        if pq.owner is None:
            raise ValueError(f"partition {pq.key} has no owner to take it from")
        member = self.members[pq.owner]
        member.partitions.pop(pq.key, None)
        member.ready.pop(pq.key, None)
        member.queued -= len(pq.pending)
        member.owed -= pq.held_pending()
        pq.owner = None
        pq.release_pins()
        self.owner_changes[pq.key] = None

    def move(self, pq: PartitionQueue, member: Member) -> None:
        self.take_away(pq)
        self.give(pq, member)

    def refresh(self, pq: PartitionQueue) -> None:
        """Keep the owner's ready set in step with the partition (after any change)."""
        self.refresh_many((pq,))

    def refresh_many(self, pqs: Iterable[PartitionQueue]) -> None:
        """:meth:`refresh` of each, in one call: a batch may touch a partition per event
        (``pq.ready`` is inlined for the same reason)."""
        changed, members, touched = self._changed, self.members, self.touched
        for pq in pqs:
            key = pq.key
            changed[key] = None
            owner = members.get(pq.owner) if pq.owner is not None else None
            if owner is None:
                continue
            if pq.pending and not pq.in_flight:
                if key not in owner.ready:
                    owner.ready[key] = None
                    touched.add(owner.member_id)
            else:
                owner.ready.pop(key, None)

    def take_owner_changes(self) -> OwnerChanges:
        """Ownership changed since the last call; the facade persists it so a restarted
        broker keeps partitions where they were."""
        changes, self.owner_changes = self.owner_changes, {}
        opened, self._opened = self._opened, set()
        firsts = all(owner is not None and key in opened for key, owner in changes.items())
        return OwnerChanges(changes, firsts)

    def restore_owner(self, key: PartitionKey, owner: str) -> None:
        """Give a partition back to the member that owned it before a restart."""
        member = self.members.get(owner)
        if member is None or not member.active:
            return
        pq = self.partitions.get(key)
        if pq is None:
            pq = self.partitions[key] = PartitionQueue(key, self._queued)
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
        book = self.loads()
        for pq in waiting:
            if self.assign(pq, book=book) is None:
                return

    # -- membership (functions of the group_membership module, bound as methods) ---------
    join = group_membership.join
    deactivate = group_membership.deactivate
    set_aside = group_membership.set_aside
    leave = group_membership.leave

    def forget(self, member_id: str) -> None:
        """Remove an inactive member for good (it holds nothing and owns nothing)."""
        member = self.members[member_id]
        if member.active:
            raise ValueError(f"{member_id} is active")
        del self.members[member_id]

    # -- delivery and acks (see the delivery and acks modules) ----------------------------
    def take_batch(self, member_id: str, now: float) -> Batch | None:
        """The next push for a member: its ready partitions, round robin, up to its room."""
        return delivery.take_batch(self, member_id, now)

    def take_event(self, member_id: str, uid: str, now: float) -> Batch | None:
        """A one-event batch of the event ``uid`` when it is next in one of the member's
        partitions (a pull client acknowledging what it got before a restart)."""
        return delivery.take_event(self, member_id, uid, now)

    def delivered(self, batch: Batch, now: float) -> bool:
        """A push was answered. False when the batch is stale (its events moved on)."""
        return delivery.delivered(self, batch, now)

    def push_failed(self, batch: Batch, now: float, sent: bool = True) -> bool:
        """A push failed in transport (``sent``: after it went out). True when this
        failure made the member inactive."""
        return delivery.push_failed(self, batch, now, sent)

    def push_declined(self, batch: Batch, now: float, pause_s: float) -> None:
        """The member is leaving and took nothing (see delivery.push_declined)."""
        delivery.push_declined(self, batch, now, pause_s)

    def reclaim(self, member_id: str, sent_before: float) -> int:
        """Events the member says it does not hold go back (see delivery.reclaim)."""
        return delivery.reclaim(self, member_id, sent_before)

    def probe_failed(self, member_id: str, now: float) -> bool:
        """A silent member did not answer a ping. True when it is now inactive."""
        return delivery.probe_failed(self, member_id, now)

    def probe_answered(self, member_id: str, now: float) -> None:
        delivery.probe_answered(self, member_id, now)

    def acknowledge(
        self,
        member_id: str,
        session: int,
        acked: Iterable[str],
        nacked: dict[str, str],
        through_seq: int,
        now: float,
        from_seq: int = 0,
        returned: Iterable[str] = (),
    ) -> AckOutcome:
        """Apply an ack message (see :func:`channel_server.core.acks.acknowledge`)."""
        return acks.acknowledge(
            self, member_id, session, acked, nacked, through_seq, now, from_seq, returned
        )

    def unpushable(
        self, member_id: str, session: int, seqs: range, reasons: dict[str, str]
    ) -> AckOutcome:
        """A delivery failed for the fault of some of its events (see acks.unpushable)."""
        return acks.unpushable(self, member_id, session, seqs, reasons)

    # -- liveness ------------------------------------------------------------------------
    def heartbeat(self, member_id: str, now: float) -> Member | None:
        member = self.members.get(member_id)
        if member is not None:
            member.seen(now)
        return member

    def sweep_idle(self, now: float, idle_s: float) -> list[PartitionKey]:
        """Drop partitions that stayed empty with nothing in flight for ``idle_s``: start
        the idle clocks of those changed since the last sweep, then drop the oldest."""
        for key in self._changed:
            pq = self.partitions.get(key)
            if pq is None or not pq.idle:
                if pq is not None:
                    pq.idle_since = None
                self._idle.pop(key, None)
            elif pq.idle_since is None:
                pq.idle_since = now
                self._idle.pop(key, None)  # to the end: its clock starts now
                self._idle[key] = None
        self._changed.clear()
        dropped, done = [], []
        for key in self._idle:
            pq = self.partitions.get(key)
            if pq is not None and pq.idle and pq.idle_since is not None:
                if now - pq.idle_since < idle_s:
                    break
                self._drop(pq)
                dropped.append(key)
            done.append(key)
        for key in done:
            del self._idle[key]
        return dropped

    def drop_idle_now(self) -> int:
        """Drop every idle partition, whatever its idle clock: the channel is at its cap of
        partition sub-queues, and an idle one only saves reopening it. Every idle partition
        is in ``_idle`` (its clock started) or ``_changed`` (idle since the last sweep)."""
        idle = [pq for key in (*self._idle, *self._changed) if (pq := self.partitions.get(key))]
        dropped = 0
        for pq in idle:
            if pq.idle and pq.key in self.partitions:
                self._drop(pq)
                self._idle.pop(pq.key, None)
                dropped += 1
        return dropped

    def _drop(self, pq: PartitionQueue) -> None:
        """Forget an idle partition (its owner's too); the store forgets its owner."""
        if pq.owner is not None and pq.owner in self.members:
            self.members[pq.owner].partitions.pop(pq.key, None)
        del self.partitions[pq.key]
        self.owner_changes[pq.key] = None
