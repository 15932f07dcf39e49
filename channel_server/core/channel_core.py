"""A channel's state machine: accept, deduplicate, bound, split into groups, retire.

Pure (DESIGN §2): the facade passes ``now`` in and holds the lock. Queue channels have the
standing ``default`` group; topic channels keep an event only for the groups that exist when
it is published (DESIGN §4). Inside the channel an event is named by its uid
(``publisher_id/id``) whatever the id scope; the scope only says what a duplicate is.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Set
from itertools import accumulate, chain, groupby
from typing import Any

from msgspec.structs import replace

from channel_server.core import restore, roster
from channel_server.core.config import ChannelConfig
from channel_server.core.dedupe import CHANNEL_REALM, DeliveredIds
from channel_server.core.group import AckOutcome, ConsumerGroup
from channel_server.core.member import Member
from channel_server.core.queues import GlobalQueue
from channel_server.core.records import (
    ChannelKind,
    DeadLetter,
    Forgotten,
    Outstanding,
    PublishOutcome,
)
from channel_server.core.snapshot import ChannelSnapshot
from channel_server.core.spill import PayloadSpill
from channel_server.events import (
    EVENT_PUBLISHER,
    EVENT_SIZE,
    Event,
    IdScope,
    PartitionKey,
    validate_batch,
)
from channel_server.names import DEFAULT_GROUP


class ChannelCore:
    """Everything a channel knows, without locks, threads or I/O."""

    def __init__(
        self,
        name: str,
        config: ChannelConfig,
        kind: ChannelKind = ChannelKind.QUEUE,
        first_session: int = 1,
        id_scope: IdScope = IdScope.PUBLISHER,
    ) -> None:
        """``first_session`` should exceed every session of the channel's earlier lives
        (the facade seeds it from the clock, then from what the store claimed, see
        :meth:`start_sessions_at`), so that an ack of a session from before a restart is
        stale.
        ``id_scope``: where ids must be unique (what the delivered-ID window holds)."""
        self.name = name
        self.config = config
        self.kind = kind
        self.id_scope = id_scope
        self._next_session = first_session
        self.global_queue = GlobalQueue()
        self.groups: dict[str, ConsumerGroup] = {}
        self.delivered = DeliveredIds(config.dedupe_max_ids, config.dedupe_max_age_s)
        self.spill = PayloadSpill(config.payload_memory_bytes)
        """Which queued events keep their payloads (none go cold until the facade gives
        it a store to read them back from)."""
        self.dead_letters: list[DeadLetter] = []
        self.letters_dropped: list[DeadLetter] = []
        """Dead letters dropped over their caps, for the facade to take: it removes them
        from the store and logs them."""
        self.next_offset = 0
        self.unacked = 0
        self.queued_bytes = 0
        """Sizes of the unacknowledged events (``Event.size``), beside their count."""
        self.published_total = 0
        """Events published to this channel in this life: duplicates and refusals too."""
        self.duplicates_total = 0
        self.refused_total = 0
        """Events refused for room (QueueFull), counted in the publish that stored the rest."""
        self.unrouted_total = 0
        self.accepted_total = 0
        self.acked_total = 0
        """Counts of this life of the channel (see :meth:`restore` and :meth:`replay`):
        ``accepted_total - acked_total == unacked`` until a group is dropped with its
        backlog."""
        self.groups_left: dict[int, int] = {}
        """offset -> groups still to acknowledge, only for events held by 2+ groups."""
        if kind is ChannelKind.QUEUE:
            self.add_group(DEFAULT_GROUP)

    # -- groups --------------------------------------------------------------------------
    def add_group(self, name: str, created_offset: int | None = None) -> ConsumerGroup:
        """The group of that name, created now (seeing events from the next offset on) or
        at ``created_offset`` when restored."""
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = ConsumerGroup(
                name,
                self.config.group_policy(),
                self.next_offset if created_offset is None else created_offset,
            )
            group.warm = self.spill.warm
        return group

    def members(self) -> int:
        """Members of every group, active or not."""
        return sum(len(group.members) for group in self.groups.values())

    def members_of(self, user: str) -> int:
        """Members of every group that ``user`` subscribed."""
        return sum(m.user == user for group in self.groups.values() for m in group.members.values())

    def make_room_for_member(self) -> list[tuple[str, str]]:
        """Room for one more member under ``max_members`` (see :func:`roster.make_room`)."""
        return roster.make_room(self)

    def expire_members(self, now: float) -> list[tuple[str, str]]:
        """Forget members long inactive (see :func:`roster.expire`)."""
        return roster.expire(self, now)

    def forget_member(self, group_name: str, member_id: str, force: bool = False) -> Forgotten:
        """Remove a member now, an operator's ``forget`` (see :func:`roster.forget`)."""
        return roster.forget(self, group_name, member_id, force)

    @property
    def next_session(self) -> int:
        return self._next_session

    def start_sessions_at(self, first: int) -> None:
        """Give out sessions from ``first`` on (the store's claim for this life), never
        going back to one given out already."""
        self._next_session = max(self._next_session, first)

    def new_session(self) -> int:
        session = self._next_session
        self._next_session += 1
        return session

    def default_group_for(self, subscriber_id: str) -> str:
        """A queue's subscribers share ``default``; on a topic each has a group of its own
        (named after it), so each gets every event published after it subscribed."""
        return DEFAULT_GROUP if self.kind is ChannelKind.QUEUE else subscriber_id

    def drop_group(self, name: str) -> list[Event]:
        """Forget a group and its backlog (its last member left). Returns the events no
        group holds any more (the facade deletes them from the store)."""
        group = self.groups.pop(name)
        backlog = [ev for pq in group.partitions.values() for ev in (*pq.pending, *pq.in_flight)]
        self.dead_letters = [d for d in self.dead_letters if d.group != name]
        return self._retire(backlog, count_acked=False)

    def outstanding(self, publisher_id: str) -> Outstanding:
        """What ``publisher_id``'s accepted events still need: deliveries queued and in
        flight, summed over groups (an event two groups must process counts twice; a queue
        has one group), and how many of its events are dead letters. Zero outstanding
        means each was acknowledged or dead-lettered; ``unserved`` names the groups whose
        share waits with no active member. Sub-queues are per (publisher, partition), so
        this walks partitions and the dead letters, never the events."""
        queued = in_flight = 0
        unserved: dict[str, int] = {}
        for group in self.groups.values():
            waiting = 0
            for (publisher, _), pq in group.partitions.items():
                if publisher == publisher_id:
                    waiting += len(pq.pending)
                    in_flight += len(pq.in_flight)
            queued += waiting
            if waiting and not any(m.active for m in group.members.values()):
                unserved[group.name] = waiting
        dead = sum(1 for d in self.dead_letters if d.event.publisher_id == publisher_id)
        return Outstanding(queued, in_flight, dead, unserved)

    # -- publish -------------------------------------------------------------------------
    def prepare(self, raw_batch: Any) -> PublishOutcome:
        """Validate the whole batch (raises InvalidEvent: nothing kept), then
        :meth:`prepare_valid` it. The channel validates before it takes its lock instead."""
        return self.prepare_valid(
            validate_batch(raw_batch, self.config.max_payload_bytes, self.config.max_publish_batch)
        )

    def prepare_valid(self, events: list[Event], accepted_at: float = 0.0) -> PublishOutcome:
        """Number a validated batch, drop known ids, and pick what fits; changes nothing
        but the offset counter, so a store failure before :meth:`enqueue` leaves no trace.

        ``events``: from :func:`~channel_server.events.validate_batch` (offset -1).
        Refusals for capacity are counted in the outcome; the facade turns them into
        QueueFull after storing what was accepted.
        """
        events = _numbered(events, self.next_offset, accepted_at)
        self.next_offset += len(events)  # offsets of refused events are never reused
        outcome = PublishOutcome()
        fresh: list[Event] = []
        seen: dict[str, set[str]] = {}
        for publisher_id, run in groupby(events, key=EVENT_PUBLISHER):  # mostly one run
            realm = self.realm(publisher_id)
            in_batch = seen.setdefault(realm, set())
            _split_known(list(run), self.delivered.known(realm), in_batch, fresh, outcome)
        if not self.groups:
            outcome.unrouted = len(fresh)
            return outcome
        room, outcome.full_by = self._room(fresh)
        outcome.accepted = fresh[:room]
        outcome.refused = [ev.id for ev in fresh[room:]]
        return outcome

    def count_publish(self, published: int, outcome: PublishOutcome) -> None:
        """Count a publish whose accepted events were stored (a failed store counts
        nothing: the publisher sends the batch again)."""
        self.published_total += published
        self.duplicates_total += len(outcome.duplicates)
        self.refused_total += len(outcome.refused)
        self.unrouted_total += outcome.unrouted

    def _room(self, fresh: list[Event]) -> tuple[int, str]:
        """How many of ``fresh`` (from the front) fit every limit, and the limit that
        refuses the rest: the count (``capacity``), the bytes (``max_queued_bytes``) or the
        partition sub-queues (``max_partition_queues``)."""
        room = min(len(fresh), max(0, self.config.capacity - self.unacked))
        counted, limit = fresh[:room], "events"
        byte_room = self.config.max_queued_bytes - self.queued_bytes
        if sum(map(EVENT_SIZE, counted)) > byte_room:
            room = bisect_right(list(accumulate(map(EVENT_SIZE, counted))), byte_room)
            counted, limit = counted[:room], "bytes"
        partition_room = self._partition_room(counted)
        if partition_room < room:
            return partition_room, "partitions"
        return room, limit

    def partition_queues(self) -> int:
        """Partition sub-queues held over every group (what ``max_partition_queues``
        bounds: each costs memory whether it holds one event or a million)."""
        return sum(len(grp.partitions) for grp in self.groups.values())

    def _partition_room(self, events: list[Event]) -> int:
        """How many of ``events`` (from the front) open no more partition sub-queues than
        ``max_partition_queues`` allows. Every group opens its own for a new partition, so
        one account's groups times its partition keys had no bound but memory. At the cap,
        idle partitions are dropped first, as the idle sweep would later."""
        cap, held = self.config.max_partition_queues, self.partition_queues()
        if held + len(self.groups) * len(events) <= cap:
            return len(events)  # the usual case: no pass over the events
        room = self._opening_room(events, cap - held)
        if room == len(events):
            return room
        dropped = [grp.drop_idle_now() for grp in self.groups.values()]
        return self._opening_room(events, cap - held + sum(dropped)) if any(dropped) else room

    def _opening_room(self, events: list[Event], spare: int) -> int:
        """How many of ``events`` (from the front) open at most ``spare`` sub-queues."""
        groups = self.groups.values()
        seen: set[PartitionKey] = set()
        for i, ev in enumerate(events):
            key = (ev.publisher_id, ev.partition)
            if key not in seen:
                seen.add(key)
                spare -= sum(1 for grp in groups if key not in grp.partitions)
                if spare < 0:
                    return i
        return len(events)

    def member(self, group: str, member_id: str) -> Member | None:
        """A group's member, if the group and the member exist."""
        grp = self.groups.get(group)
        return grp.members.get(member_id) if grp else None

    def realm(self, publisher_id: str) -> str:
        """Where a publisher's ids must be unique (see :mod:`~channel_server.core.dedupe`)."""
        return publisher_id if self.id_scope is IdScope.PUBLISHER else CHANNEL_REALM

    def enqueue(self, events: list[Event], now: float) -> None:
        """Commit accepted (and stored) events: remember their ids in the delivered
        window, order them in the global queue, then split them into every group's
        partition sub-queues."""
        for publisher_id, run in groupby(events, key=EVENT_PUBLISHER):
            self.delivered.add_many((ev.id for ev in run), now, self.realm(publisher_id))
        self.global_queue.add_many(events)
        ordered = self.spill.cool(self.global_queue.drain(), self.queued_bytes)
        holders = len(self.groups)
        if holders > 1:
            self.groups_left.update((ev.offset, holders) for ev in ordered)
        for group in self.groups.values():
            group.enqueue(ordered)
        self.unacked += len(ordered)
        self.queued_bytes += sum(map(EVENT_SIZE, ordered))
        self.accepted_total += len(ordered)

    # -- acks ----------------------------------------------------------------------------
    def acknowledge(
        self,
        group: ConsumerGroup,
        member_id: str,
        session: int,
        acked: list[str],
        nacked: dict[str, str],
        through_seq: int,
        now: float,
        from_seq: int = 0,
        returned: Iterable[str] = (),
    ) -> tuple[AckOutcome, list[Event]]:
        """Apply an ack message; returns what it did and the events now acknowledged by
        every group (the facade deletes those from the store)."""
        outcome = group.acknowledge(
            member_id, session, acked, nacked, through_seq, now, from_seq, returned
        )
        return outcome, self._settle(group, outcome)

    def bury_unpushable(
        self,
        group: ConsumerGroup,
        member_id: str,
        session: int,
        seqs: range,
        reasons: dict[str, str],
    ) -> tuple[AckOutcome, list[Event]]:
        """Events of a delivery that cannot cross the wire (by id: why) go to the
        dead-letter queue, not counted against the member; the rest of the delivery goes
        back (see acks.unpushable). Returns what happened and the events retired
        everywhere (the facade deletes those from the store)."""
        outcome = group.unpushable(member_id, session, seqs, reasons)
        return outcome, self._settle(group, outcome)

    def _settle(self, group: ConsumerGroup, outcome: AckOutcome) -> list[Event]:
        """Dead-letter what the outcome gave up on; retire what it resolved."""
        for ev, error in outcome.dead:
            self.dead_letters.append(DeadLetter(ev, group.name, error))
        if outcome.dead:
            self._bound_dead_letters()
        group.dead_lettered += len(outcome.dead)
        return self._retire(outcome.done + [ev for ev, _ in outcome.dead])

    def _bound_dead_letters(self) -> None:
        """Drop the oldest letters past ``max_dead_letters`` or ``max_dead_letter_bytes``
        (to :attr:`letters_dropped`): a handler that always failed made the broker hold
        every event published, 1.3 GB on disk and 900 MB in memory against a 32 MiB cap
        (session 33's attacker probe)."""
        letters, config = self.dead_letters, self.config
        size = sum(d.event.size for d in letters)
        drop = 0
        while drop < len(letters) and (
            len(letters) - drop > config.max_dead_letters or size > config.max_dead_letter_bytes
        ):
            size -= letters[drop].event.size
            drop += 1
        if drop:
            self.letters_dropped.extend(letters[:drop])
            del letters[:drop]

    def _retire(self, events: list[Event], count_acked: bool = True) -> list[Event]:
        """Events one more group is done with: those no group holds now are finished."""
        finished = list(events) if not self.groups_left else self._last_holders(events)
        self.unacked -= len(finished)
        self.queued_bytes -= sum(map(EVENT_SIZE, finished))
        if count_acked:
            self.acked_total += len(finished)
        return finished

    def _last_holders(self, events: list[Event]) -> list[Event]:
        """Of ``events``, those whose last holding group this was (several groups)."""
        finished = []
        for ev in events:
            left = self.groups_left.get(ev.offset)
            if left is None:
                finished.append(ev)
            elif left <= 1:
                del self.groups_left[ev.offset]
                finished.append(ev)
            else:
                self.groups_left[ev.offset] = left - 1
        return finished

    # -- dead letters --------------------------------------------------------------------
    def replay(self, ids: set[str] | None) -> tuple[list[DeadLetter], list[Event]]:
        """Take dead letters (all, or those named) out of the dead-letter queue and queue
        them again in the group they died in; a name is an event id (every publisher's
        event with it) or a uid ``publisher_id/id`` (that one). Returns them, and the events
        that had been retired everywhere, which the facade must store again."""
        chosen = [
            d for d in self.dead_letters if ids is None or d.event.id in ids or d.event.uid in ids
        ]
        self.dead_letters = [d for d in self.dead_letters if d not in chosen]
        restored = []
        for letter in chosen:
            group = self.groups.get(letter.group) or self.add_group(letter.group)
            holders = self._holders(letter.event)
            if holders:  # counted from the queues: a restart keeps no count of one holder
                self.groups_left[letter.event.offset] = holders + 1
            else:  # accepted again (not un-acknowledged: it may have died in a past life)
                restored.append(letter.event)
                self.unacked += 1
                self.queued_bytes += letter.event.size
                self.accepted_total += 1
            group.enqueue([letter.event])
        return chosen, restored

    def done_elsewhere(
        self, letters: list[DeadLetter], restored: list[Event]
    ) -> dict[str, list[Event]]:
        """Per group, the ``restored`` events (replayed after every group was done with
        them) it was published to but is not replayed to: done with them still (their
        acks went with their rows), as a restart must read it."""
        replayed_to: dict[int, set[str]] = {}
        for letter in letters:
            replayed_to.setdefault(letter.event.offset, set()).add(letter.group)
        done: dict[str, list[Event]] = {}
        for group in self.groups.values():
            if theirs := [
                ev
                for ev in restored
                if ev.offset >= group.created_offset and group.name not in replayed_to[ev.offset]
            ]:
                done[group.name] = theirs
        return done

    def _holders(self, event: Event) -> int:
        """How many groups hold ``event`` now, pending or in flight. ``groups_left`` cannot
        say: it has no entry for an event one group holds after a restart, nor for one no
        group holds, so an event dead in two groups was accepted twice by its replay and
        deleted from the store by the first group's ack (session 34's Jepsen probe)."""
        offset, held = event.offset, 0
        for group in self.groups.values():
            pq = group.partitions.get(event.key)
            if pq is not None:
                held += any(ev.offset == offset for ev in chain(pq.pending, pq.in_flight))
        return held

    # -- the backup: restart and rebuild (see the restore module) ------------------------
    def restore(self, snapshot: ChannelSnapshot, now: float) -> None:
        """Load what a store kept (a restart): see :func:`restore.restore`."""
        restore.restore(self, snapshot, now)

    def rebuild(self, snapshot: ChannelSnapshot) -> int:
        """Refill the queues from the backup, in timestamp order, leaving batches in flight
        alone. Returns how many events were put back."""
        return restore.rebuild(self, snapshot)

    def kill_queues(self) -> int:
        """The fault: empty the in-memory queues. Returns how many events were dropped."""
        dropped = len(self.global_queue)
        self.global_queue.clear()
        return dropped + sum(group.drop_pending() for group in self.groups.values())

    def lost(self) -> int:
        """Events accepted and unacknowledged that no queue holds (0 when healthy)."""
        return sum(group.lost() for group in self.groups.values())


def _split_known(
    run: list[Event],
    known: Set[str],
    in_batch: set[str],
    fresh: list[Event],
    outcome: PublishOutcome,
) -> None:
    """Events of one realm to ``fresh``, or their ids to the outcome's duplicates when
    the window or the batch had them: a run with no duplicate (nearly all) in C."""
    ids = [ev.id for ev in run]
    if known.isdisjoint(ids) and in_batch.isdisjoint(ids):
        before = len(in_batch)
        in_batch.update(ids)
        if len(in_batch) - before == len(ids):  # no id twice in the run either
            fresh += run
            return
        in_batch.difference_update(ids)  # as it was: the loop below says which repeat
    for ev in run:
        if ev.id in known or ev.id in in_batch:
            outcome.duplicates.append(ev.id)
        else:
            in_batch.add(ev.id)
            fresh.append(ev)


def _numbered(events: list[Event], first_offset: int, accepted_at: float) -> list[Event]:
    """Validated events with their offsets (event i gets ``first_offset + i``) and the
    time they were accepted: copies, since events are frozen (0.1 µs each)."""
    return [
        replace(ev, offset=offset, accepted_at=accepted_at)
        for offset, ev in enumerate(events, first_offset)
    ]
