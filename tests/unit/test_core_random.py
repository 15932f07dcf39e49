"""Randomized interleavings of the channel core, checked against an independent model.

A driver applies one operation at a time to a ChannelCore (a second consumer group is created
part-way) and writes a MemoryStore backup as the facade (channel.py) does. Its model says where
each accepted event is in every group that existed when it was published: pending, held by a
member (attempt, delivery seq), done, or dead. After every step it checks that no event is lost
or held twice; that a batch takes, per partition, the oldest ``(timestamp, offset)`` prefix of
what was pending (as much as the member's room allows) and that a partition never has two
deliveries outstanding; that attempts count deliveries; that acks, nacks, skipped acks, push
and probe failures resolve as designed; that ownership is exclusive, inactive members own
nothing, and a partition never changes owner while not movable unless its owner was
deactivated or left; that counters (bytes queued too) agree; that stale messages change
nothing; and that after a restart each partition stays with its owner and no other member
gets its restored events until they are resolved. Driven by a seeded loop and by a
Hypothesis state machine.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from channel_server.config import ChannelConfig
from channel_server.core import rebalance
from channel_server.core.channel_core import ChannelCore
from channel_server.core.member import Batch
from channel_server.events import Event, IdScope, PartitionKey, event_uid
from channel_server.store import MemoryStore
from channel_server.store.base import DeadLetterRecord, MemberRecord
from tests.unit.group_checks import check_group, ids

NAME = "rand"
GROUPS = ("default", "audit")
MEMBERS = ("a", "b", "c")
PUBLISHERS = ("p", "q")
PARTITIONS = (0, 1, 2, "k")
TIMESTAMPS = (0.5, 1.0, 2.0, 2.0, 3.0)  # few values: plenty of ties broken by offset
PREFETCHES = (1, 2, 3, 5, 12)  # 12 is above window_initial: the window caps it
REPLIES = ("ack", "ack", "ack", "nack", "skip")
POISON = "k"  # handlers always fail in this partition: its events end dead-lettered
DTS = (0.0, 0.01, 0.1, 1.0, 31.0)  # 0.01 is within a push back-off, 31 past partition_idle_s
CFG = ChannelConfig(capacity=30, max_attempts=3, partition_weight=3)
MAX = CFG.max_attempts
LIFE = 10**6  # sessions of life n start at n * LIFE: an ack from before a restart is stale
COUNTS = ("session", "prefetch", "active", "next_seq", "ack_failures", "transport_failures")
COUNTS += ("retry_at", "delivered", "acked", "in_flight")  # compared, model and core members


@dataclass
class MFlight:
    offset: int
    attempt: int
    seq: int


@dataclass
class MMember:
    session: int
    prefetch: int
    active: bool = True
    next_seq: int = 1
    ack_failures: int = 0
    transport_failures: int = 0
    retry_at: float = 0.0
    delivered: int = 0
    acked: int = 0
    answered_seq: int = 0  # the last delivery whose push was answered
    maybe_killed_by: int | None = None  # a lone push failed once sent, no sign of life since
    flights: dict[str, MFlight] = field(default_factory=dict)  # by uid, in delivery order

    @property
    def in_flight(self) -> int:
        return len(self.flights)


@dataclass
class MGroup:
    holds: set[int] = field(default_factory=set)  # offsets published while it existed
    pending: set[int] = field(default_factory=set)
    done: set[int] = field(default_factory=set)  # acked or dead-lettered here
    dead: set[int] = field(default_factory=set)
    members: dict[str, MMember] = field(default_factory=dict)
    deliveries: Counter[int] = field(default_factory=Counter)  # since the last restart
    nacks: Counter[int] = field(default_factory=Counter)  # handler failures, ditto
    pins: dict[PartitionKey, tuple[str, set[int]]] = field(default_factory=dict)
    """Partition restored with an owner -> (that owner, its restored events unresolved)."""
    held: dict[PartitionKey, tuple[str, set[int]]] = field(default_factory=dict)
    """Partition -> (owner, events back from it that it may have processed: a skipped ack,
    a failed push, a resumed session), until resolved."""
    suspects: dict[int, int] = field(default_factory=dict)
    """Events a member died holding -> deaths while it was all the member held (see
    core/poison.py): they go out alone."""


def view(member: Any) -> dict[str, Any]:
    return {name: getattr(member, name) for name in COUNTS}


def verdict(reply: str, partition: object) -> str:
    return "nack" if partition == POISON and reply == "ack" else reply


class Driver:
    """Applies one operation at a time to the core, the backup and the model."""

    def __init__(self, scope: IdScope = IdScope.PUBLISHER) -> None:
        self.store = MemoryStore()
        self.life, self.next_session, self.now, self.seq = 1, LIFE, 0.0, 0
        self.scope = scope
        self.core = ChannelCore(NAME, CFG, first_session=LIFE, id_scope=scope)
        self.store.save_group(NAME, "default", 0)
        self.sent: list[tuple[str, str]] = []  # (publisher, id) of every event published
        self.last: list[dict[str, Any]] = []  # the last batch published
        self.known: set[tuple[str, str]] = set()  # the delivered-ID window, (publisher, id)
        self.events: dict[int, Event] = {}
        self.retired: set[int] = set()
        self.accepted_life = self.retired_life = 0
        self.groups = {"default": MGroup()}
        self.history: list[Batch] = []
        self.prev_owners: dict[tuple[str, PartitionKey], tuple[str | None, bool]] = {}

    # -- model helpers -------------------------------------------------------------------
    def dedupe_key(self, publisher_id: str, event_id: str) -> tuple[str, str]:
        """What makes two events duplicates in the channel's scope."""
        return (publisher_id if self.scope is IdScope.PUBLISHER else "", event_id)

    def after_change(self) -> None:
        """As PushDelivery.changed (Outcomes.notices): persist ownership, forget the notices."""
        for grp in self.core.groups.values():
            grp.deactivations.clear()
            grp.offloads.clear()
            grp.touched.clear()
            changes = grp.take_owner_changes()
            if changes.owners:
                self.store.save_owners(NAME, grp.name, changes.owners, opened=changes.opened)

    def pending_by_key(self, mg: MGroup) -> dict[PartitionKey, list[Event]]:
        out: dict[PartitionKey, list[Event]] = {}
        for off in sorted(mg.pending, key=lambda o: (self.events[o].timestamp, o)):
            out.setdefault(self.events[off].key, []).append(self.events[off])
        return out

    def busy_keys(self, mg: MGroup) -> set[PartitionKey]:
        return {self.events[f.offset].key for m in mg.members.values() for f in m.flights.values()}

    def unmovable(self, mg: MGroup) -> set[PartitionKey]:
        owed = {key for pins in (mg.pins, mg.held) for key, (_, offs) in pins.items() if offs}
        return self.busy_keys(mg) | owed

    def put_back(
        self, mg: MGroup, mm: MMember, flight_ids: list[str], holder: str | None = None
    ) -> None:
        """Flights back to pending; with ``holder`` they stay owed to that member."""
        offsets = [mm.flights.pop(i).offset for i in flight_ids]
        mg.pending.update(offsets)
        for off in offsets if holder else ():
            key = self.events[off].key
            owner, offs = mg.held.get(key, (holder, set()))
            mg.held[key] = (holder, (offs if owner == holder else set()) | {off})

    def died(self, mg: MGroup, mm: MMember) -> None:
        """A member died (declared dead, back in a new session) holding its flights: the
        one it held alone and that reached it (or the lone event of a push that failed
        once sent, no sign of life since) is charged a death if suspect, else made
        suspect; every event it held is suspect."""
        culprit, mm.maybe_killed_by = mm.maybe_killed_by, None
        flights = list(mm.flights.values())
        if len(flights) == 1 and flights[0].seq <= mm.answered_seq:
            culprit = flights[0].offset
        if culprit is not None:
            mg.suspects[culprit] = mg.suspects[culprit] + 1 if culprit in mg.suspects else 0
        for flight in flights:
            mg.suspects.setdefault(flight.offset, 0)

    def cleared(self, mg: MGroup, offsets: list[int]) -> None:
        for off in offsets:
            mg.suspects.pop(off, None)

    def resolved(self, mg: MGroup, offsets: list[int]) -> None:
        for pins in (mg.pins, mg.held):
            for _, offs in pins.values():
                offs.difference_update(offsets)

    def drop_member(self, mg: MGroup, member_id: str, leave: bool) -> None:
        """Deactivated or left: what it held goes back, its pins are released."""
        mm = mg.members[member_id]
        if not leave:
            self.died(mg, mm)
        self.put_back(mg, mm, list(mm.flights))
        mm.active = False
        mg.pins = {key: pin for key, pin in mg.pins.items() if pin[0] != member_id}
        mg.held = {key: pin for key, pin in mg.held.items() if pin[0] != member_id}
        if leave:
            del mg.members[member_id]

    def transport_failure(self, mg: MGroup, member_id: str) -> bool:
        mm = mg.members[member_id]
        mm.transport_failures += 1
        if mm.transport_failures >= MAX:
            self.drop_member(mg, member_id, leave=False)
            return True
        mm.retry_at = self.now + CFG.retry_backoff_s * 2 ** (mm.transport_failures - 1)
        return False

    def fingerprint(self) -> list[object]:
        """What a message could change in the core (to show that a stale one changes nothing)."""
        core = self.core
        out: list[object] = [core.unacked, core.acked_total, len(core.dead_letters)]
        for grp in core.groups.values():
            for key, pq in grp.partitions.items():
                out.append((key, pq.owner, ids(pq.pending), ids(pq.in_flight), pq.pinned))
                out.append(sorted(pq.held_back))
            for m in grp.members.values():
                out.append((view(m), list(m.flights), m.last_seen, m.window.per_event_s))
            out.append(grp.held)
        return out

    # -- operations ----------------------------------------------------------------------
    def publish(self, specs: list[tuple[str, object, float, int | None]], retry: bool) -> None:
        """specs: (publisher, partition, timestamp, index of an earlier id to reuse or None);
        a retry sends the previous batch again (its publisher missed the answer)."""
        if not retry or not self.last:
            batch_ids = []
            for pub, _, _, reuse in specs:  # a reused id may be another publisher's
                self.seq += 1
                reused = reuse is not None and self.sent
                event_id = self.sent[reuse % len(self.sent)][1] if reused else f"{pub}-{self.seq}"
                batch_ids.append(event_id)
            self.last = [  # payloads of several sizes: the bytes queued are counted
                {"id": i, "publisher_id": pub, "partition": partition, "timestamp": ts}
                | {"payload": "x" * (len(i) * 7 % 11)}
                for i, (pub, partition, ts, _) in zip(batch_ids, specs, strict=True)
            ]
            self.sent.extend((raw["publisher_id"], raw["id"]) for raw in self.last)
        batch = self.last
        batch_uids = [event_uid(raw["publisher_id"], raw["id"]) for raw in batch]
        seen, dups, fresh = set(self.known), [], []
        for raw in batch:
            key = self.dedupe_key(raw["publisher_id"], raw["id"])
            (dups if key in seen else fresh).append(raw["id"])
            seen.add(key)
        room = max(0, CFG.capacity - (len(self.events) - len(self.retired)))
        first = self.core.next_offset
        outcome = self.core.prepare(batch)
        assert outcome.duplicates == dups, "publish: duplicates"
        assert ids(outcome.accepted) == fresh[:room], "publish: accepted"
        assert outcome.refused == fresh[room:], "publish: capacity refusals"
        assert self.core.next_offset == first + len(batch), "publish: offsets"
        if outcome.accepted:  # as Publishing._accept
            self.store.append(NAME, outcome.accepted, self.core.next_offset, self.now)
            self.core.enqueue(outcome.accepted, self.now)
            self.after_change()
        for ev in outcome.accepted:
            assert ev.offset == first + batch_uids.index(ev.uid), "publish: offset"
            self.events[ev.offset] = ev
            self.known.add(self.dedupe_key(ev.publisher_id, ev.id))
            for mg in self.groups.values():
                mg.holds.add(ev.offset)
                mg.pending.add(ev.offset)
        self.accepted_life += len(outcome.accepted)

    def join(self, group: str, member_id: str, prefetch: int) -> None:
        """subscribe: join or resume, in a new session."""
        grp = self.core.groups.get(group)
        if grp is None:  # as Membership._add_group
            grp = self.core.add_group(group)
            assert grp.created_offset == self.core.next_offset, "join: created_offset"
            self.store.save_group(NAME, group, grp.created_offset)
            self.groups[group] = MGroup()
        mg = self.groups[group]
        old = mg.members.get(member_id)
        kept = set(grp.members[member_id].partitions) if old and old.active else set()
        if old:
            self.died(mg, old)
            self.put_back(mg, old, list(old.flights), member_id if old.active else None)
        member = grp.join(member_id, f"cb-{member_id}", prefetch, self.core.new_session(), self.now)
        assert member.session == self.next_session, "join: not a new session"
        self.next_session += 1
        mm = mg.members[member_id] = MMember(member.session, prefetch)
        mm.delivered, mm.acked = (old.delivered, old.acked) if old else (0, 0)
        assert kept <= member.partitions.keys(), f"{group}/{member_id}: resumed, lost partitions"
        self.store.save_member(MemberRecord(NAME, group, member_id, f"cb-{member_id}", prefetch))
        self.after_change()

    def leave(self, group: str, member_id: str, leave: bool) -> None:
        """leave (unsubscribe), or deactivate (declared dead)."""
        grp = self.core.groups.get(group)
        if grp is None or member_id not in grp.members:
            return
        if leave:
            grp.leave(member_id)
            self.store.remove_member(NAME, group, member_id)
        else:
            grp.deactivate(member_id, "declared dead")
        self.drop_member(self.groups[group], member_id, leave)
        self.after_change()

    def take(self, group: str, member_id: str) -> None:
        grp = self.core.groups.get(group)
        if grp is None:
            return
        mg = self.groups[group]
        mm, member = mg.members.get(member_id), grp.members.get(member_id)
        limit = member.window.limit() if member else 0
        # a long job in hand closes the window: the core's judgement (unit-tested on its own)
        stalled = member is not None and member.active and member.check_stall(self.now)
        owned = set(member.partitions) if member else set()
        pending, busy = self.pending_by_key(mg), self.busy_keys(mg)
        batch = grp.take_batch(member_id, self.now)
        if mm is None or not mm.active or self.now < mm.retry_at:
            assert batch is None, f"{group}/{member_id}: a batch while inactive or backing off"
            return
        assert 1 <= limit <= mm.prefetch, f"{group}/{member_id}: window {limit}"
        ready = {key: pending[key] for key in owned if key in pending and key not in busy}
        held = {key: offs for key, (who, offs) in mg.held.items() if who == member_id}
        owed = sum(len(offs & mg.pending) for key, offs in held.items() if key in owned)
        budget = 0 if stalled else limit - len(mm.flights) - owed
        got = len(batch.events) if batch else 0
        if any(evs[0].offset in mg.suspects for evs in ready.values()):
            self.took_alone(group, member_id, mg, mm, ready, batch)
            return
        owed_ready = any(ev.offset in held.get(k, ()) for k, evs in ready.items() for ev in evs)
        if not ready or (budget <= 0 and not owed_ready):
            assert batch is None, f"{group}/{member_id}: took {got} with no room"
            return
        assert batch is not None, f"{group}/{member_id}: nothing taken of {ready}"
        head = (batch.group, batch.member_id, batch.session, batch.first_seq)
        assert head == (group, member_id, mm.session, mm.next_seq), f"batch {head}"
        by_key: dict[PartitionKey, list[Event]] = {}
        for ev in batch.events:
            by_key.setdefault(ev.key, []).append(ev)
        trailing = 0  # events owed to no one, after the last owed one of their partition
        for key, evs in by_key.items():
            assert key in ready, f"{group}/{member_id}: got {key}: not its own, or in flight"
            assert ids(evs) == ids(ready[key][: len(evs)]), f"{group}: {key} out of order"
            mine = held.get(key, set())
            rest = [ev for ev in ready[key][len(evs) :] if ev.offset in mine]
            assert not rest, f"{group}: {key} owed events left behind: {ids(rest)}"
            last = max((n for n, ev in enumerate(evs) if ev.offset in mine), default=-1)
            trailing += len(evs) - last - 1
            owner, restored = mg.pins.get(key, (member_id, set()))
            assert owner == member_id or restored.isdisjoint(ev.offset for ev in evs), (
                f"{group}: restored events of {key} pinned to {owner} went to {member_id}"
            )
        assert trailing <= max(budget, 0), f"{group}/{member_id}: {trailing} over room {budget}"
        fresh = sum(1 for ev in batch.events if ev.offset not in held.get(ev.key, ()))
        if fresh < budget:  # room left: everything ready was taken
            left = {k: len(evs) - len(by_key.get(k, [])) for k, evs in ready.items()}
            assert not any(left.values()), f"{group}/{member_id}: room left, {left} not taken"
        self.launched(mg, mm, batch)

    def took_alone(
        self,
        group: str,
        member_id: str,
        mg: MGroup,
        mm: MMember,
        ready: dict[PartitionKey, list[Event]],
        batch: Batch | None,
    ) -> None:
        """A suspect is ready: it goes alone, to a member holding nothing."""
        if mm.flights:
            assert batch is None, f"{group}/{member_id}: a push while a suspect waits"
            return
        assert batch is not None and len(batch.events) == 1, f"{group}/{member_id}: not alone"
        ev = batch.events[0]
        assert ev.key in ready and ready[ev.key][0].offset == ev.offset, f"{ev.id}: not next"
        assert ev.offset in mg.suspects, f"{ev.id}: alone, not a suspect"
        self.launched(mg, mm, batch)

    def launched(self, mg: MGroup, mm: MMember, batch: Batch) -> None:
        for i, (ev, attempt) in enumerate(zip(batch.events, batch.attempts, strict=True)):
            mg.deliveries[ev.offset] += 1
            assert attempt == mg.deliveries[ev.offset], f"{ev.id}: attempt {attempt}"
            mg.pending.remove(ev.offset)
            mm.flights[ev.uid] = MFlight(ev.offset, attempt, batch.first_seq + i)
        mm.next_seq += len(batch.events)
        mm.delivered += len(batch.events)
        self.history.append(batch)
        self.after_change()

    def ack(self, group: str, member_id: str, replies: list[str], through: int) -> None:
        """An ack message for the member's current flights: reply i is for flight i (the
        rest are named neither way), ``through`` picks through_seq (past them all when above
        their number); a reply beyond the flights names some other uid (held elsewhere,
        done, or named twice)."""
        mm = self.groups[group].members.get(member_id) if group in self.groups else None
        flights = list(mm.flights.items()) if mm else []
        pairs = [(i, self.events[f.offset].partition) for i, f in flights]
        if len(replies) > len(flights) and self.sent:
            pairs.append((event_uid(*self.sent[len(replies) * 7 % len(self.sent)]), None))
        k = min(through, len(flights))
        seq = flights[k - 1][1].seq if k else 0
        seq = mm.next_seq + 5 if mm and through > len(flights) else seq
        session = mm.session if mm else 1
        self.acknowledge(group, member_id, session, pairs, replies, seq)

    def ack_batch(self, index: int, replies: list[str]) -> None:
        """Acks for a batch handed out earlier: of the current session, or stale."""
        if self.history:
            b = self.history[index % len(self.history)]
            pairs = [(ev.uid, ev.partition) for ev in b.events]
            last = b.first_seq + len(b.events) - 1
            self.acknowledge(b.group, b.member_id, b.session, pairs, replies, last)

    def acknowledge(
        self,
        group: str,
        member_id: str,
        session: int,
        pairs: list[tuple[str, object]],
        replies: list[str],
        through: int,
    ) -> None:
        """Send an ack message (reply i for pairs[i]) and check what it did against the model."""
        said = [(i, verdict(r, part)) for (i, part), r in zip(pairs, replies, strict=False)]
        acked = [i for i, v in said if v == "ack"]
        nacked = {i: f"boom {i}" for i, v in said if v == "nack"}
        grp, mg = self.core.groups.get(group), self.groups.get(group)
        if grp is None or mg is None:
            return
        mm = mg.members.get(member_id)
        live = mm is not None and mm.active and mm.session == session
        unheld = [i for i in acked if not (live and i in mm.flights)]
        owed = self.owed_to(grp, mg, member_id, unheld) if mm and mm.active else []
        flown = [] if live or mm is None or not mm.active else list(dict.fromkeys(acked))
        flown = [i for i in flown if i in mm.flights]  # held again: a stale ack still counts
        before = None if live or owed or flown else self.fingerprint()  # a stale no-op
        outcome, retired = self.core.acknowledge(
            grp, member_id, session, acked, nacked, through, self.now
        )
        if mm is None or not live:
            assert outcome.stale, "a stale ack called current"
            assert before is None or self.fingerprint() == before, "a stale ack changed something"
            got = [ev.offset for ev in outcome.done]
            done = [mm.flights.pop(i).offset for i in flown]
            assert got[: len(done)] == done, "stale ack: done of what it holds"
            assert sorted(got[len(done) :]) == sorted(owed), "stale ack: done of what it owes"
            if done or owed:
                self.settle(group, mg, mm, outcome, retired, done + owed, [])
            return
        assert not outcome.stale, f"{group}/{member_id}: a current ack called stale"
        mm.maybe_killed_by = None  # a sign of life
        done, dead, back = [], [], []
        for event_id in acked:
            if (flight := mm.flights.pop(event_id, None)) is not None:
                mg.nacks.pop(flight.offset, None)
                done.append(flight.offset)
        for event_id in nacked:
            if (flight := mm.flights.pop(event_id, None)) is not None:
                mg.nacks[flight.offset] += 1
                (dead if mg.nacks[flight.offset] >= MAX else back).append(flight.offset)
        for off in dead:
            del mg.nacks[off]
        skipped = [i for i, f in mm.flights.items() if f.seq <= through]
        skipped_offsets = [mm.flights.pop(i).offset for i in skipped]
        back += skipped_offsets
        mg.pending.update(back)
        got = [ev.offset for ev in outcome.done]
        assert got[: len(done)] == done, "ack: done"
        assert sorted(got[len(done) :]) == sorted(owed), "ack: done of events it may have done"
        assert [ev.offset for ev in outcome.retried] == back, "ack: retried"
        assert outcome.missing == len(skipped), "ack: missing"
        letters = [(self.events[off], nacked[self.events[off].uid]) for off in dead]
        assert outcome.dead == letters, "ack: dead-lettered"
        for _, offs in mg.held.values():  # failed handlers: nothing owed for those
            offs.difference_update(back[: len(back) - len(skipped_offsets)])
        for off in skipped_offsets:
            key = self.events[off].key
            owner, offs = mg.held.get(key, (member_id, set()))
            mg.held[key] = (member_id, (offs if owner == member_id else set()) | {off})
        if skipped or done or dead or back:
            mm.ack_failures = mm.ack_failures + 1 if skipped else 0
        gave_up = bool(skipped) and mm.ack_failures >= MAX
        assert outcome.deactivated is gave_up, f"{group}/{member_id}: deactivated by acks"
        if gave_up:
            self.drop_member(mg, member_id, leave=False)
        self.settle(group, mg, mm, outcome, retired, done + owed, dead)

    def owed_to(self, grp: Any, mg: MGroup, member_id: str, acked: list[str]) -> list[int]:
        """Pending events an ack resolves without holding them: in a partition the member
        owns and may have processed already (pinned or held back), and in the core's queue
        (not dropped by kill_queues before the rebuild)."""
        owed = {key for pins in (mg.pins, mg.held) for key, (_, offs) in pins.items() if offs}
        by_uid = {self.events[o].uid: o for o in mg.pending}
        found = []
        for uid in dict.fromkeys(acked):
            off = by_uid.get(uid)
            if off is None:
                continue
            pq = grp.partitions.get(self.events[off].key)
            queued = pq is not None and any(ev.offset == off for ev in pq.pending)
            if queued and pq.key in owed and pq.owner == member_id:
                found.append(off)
        return found

    def settle(
        self,
        group: str,
        mg: MGroup,
        mm: MMember,
        outcome: Any,
        retired: list[Event],
        done: list[int],
        dead: list[int],
    ) -> None:
        """Done and dead events of an ack message: the model, retirement and the store."""
        mm.acked += len(done)
        for off in done:
            mg.pending.discard(off)
            mg.nacks.pop(off, None)
        mg.done.update(done + dead)
        mg.dead.update(dead)
        self.resolved(mg, done + dead)
        self.cleared(mg, done + dead)
        groups = self.groups.values()
        newly = {o for o in done + dead if all(o in g.done for g in groups if o in g.holds)}
        assert {ev.offset for ev in retired} == newly, "ack: retired"
        self.retired |= newly
        self.retired_life += len(newly)
        if outcome.dead:  # as ChannelBackup.outcome
            dead_letters = [DeadLetterRecord(group, ev, error) for ev, error in outcome.dead]
            self.store.add_dead_letters(NAME, dead_letters)
        if kept := [ev.offset for ev in outcome.done if ev.offset not in newly]:
            self.store.ack(NAME, group, kept)
        if newly:
            self.store.delete(NAME, sorted(newly))
        self.after_change()

    def push(self, index: int, failed: bool) -> None:
        """A batch handed out earlier was answered, or its push failed in transport."""
        if not self.history:
            return
        recent = index % 2 == 0  # the last few pushes half the time: most are current
        b = self.history[-1 - index % 3] if recent and len(self.history) > 2 else None
        b = b or self.history[index % len(self.history)]
        grp, mg = self.core.groups[b.group], self.groups[b.group]
        mm = mg.members.get(b.member_id)
        live = mm is not None and mm.active and mm.session == b.session
        before = None if live else self.fingerprint()
        sent = index % 3 != 0  # a failure after the push went out (else: before)
        result = grp.push_failed(b, self.now, sent) if failed else grp.delivered(b, self.now)
        if mm is None or not live:
            assert result is False and self.fingerprint() == before, "a stale push changed state"
        elif not failed:
            assert result is True, "delivered: a current batch called stale"
            mm.transport_failures = 0
            mm.answered_seq = max(mm.answered_seq, b.first_seq + len(b.events) - 1)
            mm.maybe_killed_by = None  # a sign of life
        else:
            last = b.first_seq + len(b.events)
            pushed = [i for i, f in mm.flights.items() if b.first_seq <= f.seq < last]
            offsets = [mm.flights[i].offset for i in pushed]
            alone = len(pushed) == len(mm.flights) == 1
            if sent:
                mm.maybe_killed_by = None  # alive when it went
            self.put_back(mg, mm, pushed, b.member_id)
            gave_up = self.transport_failure(mg, b.member_id)
            assert result is gave_up, "push_failed: gave up"
            if sent and not gave_up and alone:
                mm.maybe_killed_by = offsets[0]
            elif sent and not gave_up:
                for off in offsets:
                    mg.suspects.setdefault(off, 0)
        self.after_change()

    def probe(self, group: str, member_id: str, answered: bool) -> None:
        grp, mg = self.core.groups.get(group), self.groups.get(group)
        if grp is None or mg is None:
            return
        mm = mg.members.get(member_id)
        if answered:
            grp.probe_answered(member_id, self.now)
            if mm:
                mm.transport_failures = 0
                mm.maybe_killed_by = None  # a sign of life
        else:
            gave_up = grp.probe_failed(member_id, self.now)
            want = self.transport_failure(mg, member_id) if mm and mm.active else False
            assert gave_up is want, f"{group}/{member_id}: probe_failed"
        self.after_change()

    def offload(self, group: str, member_id: str) -> None:
        grp = self.core.groups.get(group)
        if grp is None or member_id not in grp.members or not grp.members[member_id].active:
            return
        unmovable = self.unmovable(self.groups[group])
        moved = rebalance.offload(grp, member_id)
        assert unmovable.isdisjoint(moved), f"{group}: offload moved {moved}, not movable"
        self.after_change()

    def tick(self, dt: float) -> None:
        """Time passes; the housekeeping round drops idle partitions."""
        self.now += dt
        for name, grp in self.core.groups.items():
            mg = self.groups[name]
            idle = set(grp.partitions) - set(self.pending_by_key(mg)) - self.busy_keys(mg)
            dropped = set(grp.sweep_idle(self.now, CFG.partition_idle_s))
            assert dropped <= idle and dropped.isdisjoint(grp.partitions), f"swept {dropped}"
        self.after_change()

    def kill_and_rebuild(self, acks: list[tuple[str, str, list[str], int]]) -> None:
        """kill_queues; acks may still come in (ack does not check the queues); rebuild."""
        pending = sum(len(mg.pending) for mg in self.groups.values())
        dropped = self.core.kill_queues()
        assert dropped == pending == self.core.lost(), "kill_queues: dropped"
        for group, member_id, replies, through in acks:
            self.ack(group, member_id, replies, through)
        refilled = self.core.rebuild(self.store.load(NAME))
        pending = sum(len(mg.pending) for mg in self.groups.values())
        lost = {g.name: g.held - g.backlog for g in self.core.groups.values()}
        assert refilled == pending, f"rebuild: refilled {refilled}, not {pending} ({lost} lost)"
        assert not any(lost.values()), f"rebuild left events lost: {lost}"
        self.after_change()

    def restart(self) -> None:
        """A new life: a fresh core restored from the backup (as EventChannel.restore)."""
        old = self.core
        before = {
            (name, key): pq.owner
            for name, grp in old.groups.items()
            for key, pq in grp.partitions.items()
            if pq.owner is not None and (pq.pending or pq.in_flight)
        }
        snap = self.store.load(NAME)
        # a durable store keeps the delivered-ID window; the memory store leaves it to the core
        # as (publisher, id): the publisher "" on a channel-wide channel, as a store from
        # before id scopes has it (the core's realm)
        window = [(realm, event_id, 0.0) for realm, event_id in old.delivered.entries()]
        assert {self.dedupe_key(pub, i) for pub, i, _ in window} == self.known, "window"
        snap = replace(snap, delivered=window)
        self.life += 1
        self.core = ChannelCore(NAME, CFG, first_session=self.life * LIFE, id_scope=self.scope)
        self.core.restore(snap, self.now)
        for grp in self.core.groups.values():
            self.store.save_group(NAME, grp.name, grp.created_offset)
        # restored events count as accepted in the new life, as their acks will count
        self.accepted_life, self.retired_life = len(self.events) - len(self.retired), 0
        sessions = []
        for name, mg in self.groups.items():
            grp = self.core.groups[name]
            assert set(grp.members) == set(mg.members), f"restart: members of {name}"
            mg.deliveries.clear()
            mg.nacks.clear()
            mg.suspects.clear()
            for member_id, mm in mg.members.items():
                self.put_back(mg, mm, list(mm.flights))
                sessions.append(grp.members[member_id].session)
                mg.members[member_id] = MMember(sessions[-1], mm.prefetch)
            restored = self.pending_by_key(mg)
            saved = snap.owners.get(name, {})
            mg.pins, mg.held = {}, {}
            for key, pq in grp.partitions.items():
                assert pq.owner == saved.get(key, pq.owner), f"restart: {key} not to {saved[key]}"
                assert pq.owner == before.get((name, key), pq.owner), f"restart: {key} moved"
                if pq.owner is not None and key in restored:
                    mg.pins[key] = (pq.owner, {ev.offset for ev in restored[key]})
        first = self.life * LIFE
        assert sorted(sessions) == list(range(first, first + len(sessions))), "restart: sessions"
        self.next_session = first + len(sessions)
        self.after_change()

    # -- the checks ----------------------------------------------------------------------
    def check(self) -> None:
        core = self.core
        assert set(core.groups) == set(self.groups), "groups"
        owners: dict[tuple[str, PartitionKey], tuple[str | None, bool]] = {}
        for name, grp in core.groups.items():
            mg = self.groups[name]
            check_group(grp)
            flying = [f.offset for mm in mg.members.values() for f in mm.flights.values()]
            where = mg.pending | set(flying)
            assert len(set(flying)) == len(flying), f"{name}: an event held twice"
            assert mg.pending.isdisjoint(flying) and where.isdisjoint(mg.done), f"{name}: twice"
            assert not mg.holds - where - mg.done, f"{name} lost {mg.holds - where - mg.done}"
            assert where | mg.done == mg.holds, f"{name} holds {where - mg.holds}"
            want = {key: ids(evs) for key, evs in self.pending_by_key(mg).items()}
            have = {key: ids(pq.pending) for key, pq in grp.partitions.items() if pq.pending}
            assert have == want, f"{name}: pending {have} != model {want}"
            assert grp.held == grp.backlog == len(mg.holds - mg.done), f"{name}: held/backlog"
            assert set(grp.members) == set(mg.members), f"{name}: members"
            for member_id, mm in mg.members.items():
                m = grp.members[member_id]
                assert view(m) == view(mm), f"{name}/{member_id}: {view(m)} != model {view(mm)}"
                flights = [(i, f.event.offset, f.attempt, f.seq) for i, f in m.flights.items()]
                model = [(i, f.offset, f.attempt, f.seq) for i, f in mm.flights.items()]
                assert flights == model, f"{name}/{member_id}: flights {flights} != {model}"
                assert m.maybe_killed_by == mm.maybe_killed_by, f"{name}/{member_id}: culprit"
            mg.pins = {key: pin for key, pin in mg.pins.items() if pin[1]}
            mg.held = {key: pin for key, pin in mg.held.items() if pin[1]}
            unmovable = self.unmovable(mg)
            for key, pq in grp.partitions.items():
                owner, restored = mg.pins.get(key, (pq.owner, set()))
                assert pq.owner == owner, f"{name}: {key} left {owner} with restored events"
                assert pq.pinned == len(restored), f"{name}: {key} pinned {pq.pinned}"
                holder, back = mg.held.get(key, (pq.owner, set()))
                assert pq.owner == holder, (
                    f"{name}: {key} left {holder} with events it may have done"
                )
                assert pq.held_back == back, f"{name}: {key} held back {pq.held_back} != {back}"
                assert pq.movable == (key not in unmovable), f"{name}: {key} movable"
                owners[(name, key)] = (pq.owner, key in unmovable)
            owed = set(mg.pins) | set(mg.held)
            assert owed <= set(grp.partitions), f"{name}: a pinned partition dropped"
            assert grp.suspects == mg.suspects, f"{name}: suspects {grp.suspects} != {mg.suspects}"
            letters = sorted(d.event.offset for d in core.dead_letters if d.group == name)
            assert letters == sorted(mg.dead), f"{name}: dead letters"
        for key, (old, was_unmovable) in self.prev_owners.items():
            new, unmovable_now = owners.get(key, (old, False))
            if old is not None and new != old and was_unmovable and unmovable_now:
                mm = self.groups[key[0]].members.get(old)
                assert mm is None or not mm.active, f"{key} moved from {old} while not movable"
        self.prev_owners = owners
        groups = self.groups.values()
        done = {o for o in self.events if all(o in g.done for g in groups if o in g.holds)}
        assert self.retired == done, "retired"
        assert core.accepted_total == self.accepted_life, "accepted_total"
        assert core.acked_total == self.retired_life, "acked_total"
        assert core.unacked == len(self.events) - len(self.retired), "unacked"
        unacked = set(self.events) - self.retired
        assert core.queued_bytes == sum(self.events[o].size for o in unacked), "queued_bytes"
        assert core.lost() == 0, "lost"
        snap = self.store.load(NAME)
        assert {ev.offset for ev in snap.events} == set(self.events) - self.retired, "store"
        for name, mg in self.groups.items():
            acked = mg.done - mg.dead - self.retired
            assert snap.acks.get(name, set()) == acked, f"store: acks of {name}"


# -- the operations, drawn by a seeded loop and by a Hypothesis state machine -------------
OPS = {"publish": 12, "join": 5, "leave": 2, "deactivate": 1, "take": 22, "ack": 18}
OPS |= {"ack_batch": 4, "push": 5, "probe": 3, "offload": 1, "tick": 4, "kill": 1, "restart": 1}
WEIGHTED = [op for op, weight in OPS.items() for _ in range(weight)]
Pick = Callable[[Sequence[Any]], Any]


def random_op(driver: Driver, pick: Pick, num: Callable[[int, int], int]) -> None:
    """One operation with its arguments; ``pick`` chooses from a sequence, ``num(lo, hi)``
    an integer (from a seeded Random, or drawn by Hypothesis)."""
    op, member = pick(WEIGHTED), pick(MEMBERS)
    group = pick([g for g in GROUPS if g in driver.groups])
    active = [m for m, mm in driver.groups[group].members.items() if mm.active]
    if op in ("take", "ack") and active and num(0, 9):
        member = pick(active)

    def replies() -> list[str]:
        return [pick(REPLIES) for _ in range(num(0, 8))]

    if op == "publish":
        specs = []
        for _ in range(num(1, 5)):
            ts = pick(TIMESTAMPS) + pick((0.0, 0.0, driver.now))
            reuse = num(0, 999) if num(0, 6) == 0 else None
            specs.append((pick(PUBLISHERS), pick(PARTITIONS), ts, reuse))
        driver.publish(specs, retry=num(0, 3) == 0)
    elif op == "join":
        driver.join(pick(GROUPS), member, pick(PREFETCHES))
    elif op in ("leave", "deactivate"):
        driver.leave(group, member, leave=op == "leave")
    elif op == "take":
        driver.take(group, member)
    elif op == "ack":
        driver.ack(group, member, replies(), num(0, 9))
    elif op == "ack_batch":
        driver.ack_batch(num(0, 99), replies())
    elif op == "push":
        driver.push(num(0, 99), failed=num(0, 9) < 7)
    elif op == "probe":
        driver.probe(group, member, answered=num(0, 9) < 3)
    elif op == "offload":
        driver.offload(group, member)
    elif op == "tick":
        driver.tick(pick(DTS))
    elif op == "kill":
        acks = [(group, pick(MEMBERS), replies(), num(0, 9)) for _ in range(num(0, 2))]
        driver.kill_and_rebuild(acks)
    else:
        driver.restart()


def test_seeded_random_interleavings() -> None:
    for seed in range(300):
        rng = random.Random(seed)
        driver = Driver(IdScope.CHANNEL if seed % 2 else IdScope.PUBLISHER)
        for step in range(120):
            try:
                random_op(driver, rng.choice, rng.randint)
                driver.check()
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, step {step}: {exc}") from exc


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.driver = Driver()

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        random_op(
            self.driver,
            lambda seq: data.draw(st.sampled_from(seq)),
            lambda lo, hi: data.draw(st.integers(lo, hi)),
        )

    @invariant()
    def consistent(self) -> None:
        self.driver.check()


CoreMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_core_state_machine = CoreMachine.TestCase
