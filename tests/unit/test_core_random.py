"""Randomized interleavings of publishes, joins, leaves, takes, acks and failures.

One driver applies operations to a ChannelCore (two consumer groups, the second created
part-way) and keeps an independent model of where every accepted event must be. After every
step it checks that no accepted event is lost or held twice, that ownership is exclusive,
that counters agree, and the ordering guarantee of DESIGN §5 in its strongest true form:
when a batch is taken, each partition's share of it is the oldest ``(timestamp, offset)``
prefix of what that partition had pending, and a partition never has two batches in flight.
(Redelivery after a nack or a lost ack can make acks of a partition non-monotonic over time,
so "acks are globally sorted" is not a property of the design; "nothing is delivered ahead
of an older pending event of its partition" is.)

Driven twice: by a seeded loop over many seeds, and by a Hypothesis state machine.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore
from channel_server.core.group import Batch
from channel_server.events import Event
from channel_server.store import MemoryStore
from channel_server.store.base import DeadLetterRecord
from tests.unit.group_checks import check_group, ids

GROUPS = ("default", "audit")
MEMBERS = ("a", "b", "c")
PUBLISHERS = ("p", "q")
PARTITIONS = (0, 1, 2, "k")
TIMESTAMPS = (1.0, 2.0, 2.0, 3.0, 5.0)  # few values: plenty of ties broken by offset
PREFETCHES = (1, 2, 3, 5)
CAPACITY = 30
MAX_ATTEMPTS = 3
IDLE_S = 30.0


def sort_key(ev: Event) -> tuple[float, int]:
    return (ev.timestamp, ev.offset)


class CoreDriver:
    """Applies one operation at a time and checks the model after each."""

    def __init__(self) -> None:
        cfg = dataclasses.replace(
            ChannelConfig(), capacity=CAPACITY, max_attempts=MAX_ATTEMPTS, partition_weight=3
        )
        self.core = ChannelCore("rand", cfg)
        self.store = MemoryStore()  # the backup, written as the channel facade writes it
        self.now = 0.0
        self.seq = 0
        self.sent_ids: list[str] = []
        self.events: dict[int, Event] = {}
        self.accepted_ids: set[str] = set()
        self.retired: set[int] = set()
        self.holds: dict[str, set[int]] = {}
        self.done: dict[str, set[int]] = {}
        self.outstanding: dict[str, list[Batch]] = {}
        self.deliveries: dict[str, Counter] = {}
        self.nacks: dict[str, Counter] = {}
        self.consecutive: dict[str, Counter] = {}
        self._model_group("default")

    def _model_group(self, name: str) -> None:
        self.holds[name], self.done[name], self.outstanding[name] = set(), set(), []
        self.deliveries[name], self.nacks[name] = Counter(), Counter()
        self.consecutive[name] = Counter()

    # -- operations -----------------------------------------------------------------------
    def publish(self, specs: list[tuple[str, object, float, int | None]]) -> None:
        """specs: (publisher, partition, timestamp, index of an earlier id to reuse or None)."""
        batch, batch_ids = [], []
        for pub, partition, ts, reuse in specs:
            if reuse is not None and self.sent_ids:
                event_id = self.sent_ids[reuse % len(self.sent_ids)]
            else:
                self.seq += 1
                event_id = f"{pub}-{self.seq}"
            batch_ids.append(event_id)
            batch.append(
                {"id": event_id, "publisher_id": pub, "partition": partition, "timestamp": ts}
            )
        self.sent_ids.extend(batch_ids)
        expected_dups = [
            eid
            for i, eid in enumerate(batch_ids)
            if eid in self.accepted_ids or eid in batch_ids[:i]
        ]
        fresh = [
            eid
            for i, eid in enumerate(batch_ids)
            if eid not in self.accepted_ids and eid not in batch_ids[:i]
        ]
        room = max(0, CAPACITY - (len(self.events) - len(self.retired)))
        outcome = self.core.prepare(batch)
        assert outcome.duplicates == expected_dups
        assert ids(outcome.accepted) == fresh[:room]
        assert outcome.refused == fresh[room:]
        if outcome.accepted:
            self.store.append("rand", outcome.accepted, self.core.next_offset, self.now)
        self.core.enqueue(outcome.accepted, self.now)
        for ev in outcome.accepted:
            self.events[ev.offset] = ev
            self.accepted_ids.add(ev.id)
            for name in self.core.groups:
                self.holds[name].add(ev.offset)

    def join(self, group: str, member_id: str, prefetch: int) -> None:
        if group not in self.core.groups:
            self.core.add_group(group)
            self._model_group(group)
        grp = self.core.groups[group]
        known = grp.members.get(member_id)
        session = known.session if known else 0
        member = grp.join(member_id, f"cb-{member_id}", prefetch)
        assert member.active and not member.leaving
        assert member.session == session + 1
        self.consecutive[group][member_id] = 0

    def leave(self, group: str, member_id: str) -> None:
        grp = self.core.groups.get(group)
        if grp is None or member_id not in grp.members:
            return
        busy = any(b.member_id == member_id for b in self.outstanding[group])
        assert grp.leave(member_id) is (not busy)
        assert (member_id in grp.members) is busy

    def deactivate(self, group: str, member_id: str) -> None:
        grp = self.core.groups.get(group)
        if grp is not None and member_id in grp.members:
            grp.deactivate(member_id)
            assert not grp.members[member_id].active

    def offload(self, group: str, member_id: str) -> None:
        grp = self.core.groups.get(group)
        if grp is None or member_id not in grp.members or not grp.members[member_id].active:
            return
        busy_keys = {ev.key for b in self.outstanding[group] for ev in b.events}
        moved = grp.offload(member_id)
        assert busy_keys.isdisjoint(moved)

    def take(self, group: str, member_id: str) -> None:
        grp = self.core.groups.get(group)
        if grp is None:
            return
        member = grp.members.get(member_id)
        pending = {key: list(pq.pending) for key, pq in grp.partitions.items()}
        in_flight_keys = {key for key, pq in grp.partitions.items() if pq.in_flight}
        owned = set(member.partitions) if member else set()
        budget = member.prefetch - member.in_flight if member else 0
        batch = grp.take_batch(member_id)
        if member is None or not member.active:
            assert batch is None
            return
        if batch is None:
            ready = [k for k in owned if grp.partitions[k].ready]
            assert budget <= 0 or not ready, f"{member_id} starved with {ready} ready"
            return
        assert batch.member_id == member_id
        assert 0 < len(batch.events) <= budget
        by_key: dict = {}
        for ev in batch.events:
            by_key.setdefault(ev.key, []).append(ev)
        for key, evs in by_key.items():
            assert key in owned, f"{member_id} got {key} it does not own"
            assert key not in in_flight_keys, f"second batch of {key} in flight"
            assert evs == sorted(evs, key=sort_key)
            # the oldest pending events of the partition, nothing skipped
            assert evs == pending[key][: len(evs)], f"{key} delivered out of order"
        for ev, attempt in zip(batch.events, batch.attempts, strict=True):
            self.deliveries[group][ev.offset] += 1
            assert attempt == self.deliveries[group][ev.offset], (ev.id, attempt)
        self.outstanding[group].append(batch)

    def complete(self, group: str, index: int, replies: list[str]) -> None:
        if not self.outstanding.get(group):
            return
        batch = self.outstanding[group].pop(index % len(self.outstanding[group]))
        grp = self.core.groups[group]
        acked, nacked = set(), {}
        expect_done, expect_dead, expect_retried = [], [], []
        for ev, reply in zip(batch.events, replies + ["ack"] * len(batch.events), strict=False):
            if reply == "ack":
                acked.add(ev.id)
                expect_done.append(ev.id)
            elif reply == "nack":
                nacked[ev.id] = f"boom {ev.id}"
                self.nacks[group][ev.offset] += 1
                if self.nacks[group][ev.offset] >= MAX_ATTEMPTS:
                    expect_dead.append(ev.id)
                else:
                    expect_retried.append(ev.id)
            else:
                expect_retried.append(ev.id)
        missing = sum(1 for ev in batch.events if ev.id not in acked and ev.id not in nacked)
        member = grp.members[batch.member_id]
        was_active = member.active
        outcome, retired = self.core.complete(grp, batch, acked, nacked)
        assert ids(outcome.done) == expect_done
        assert [ev.id for ev, _ in outcome.dead] == expect_dead
        assert ids(outcome.retried) == expect_retried
        assert outcome.missing == missing
        self._count(group, batch.member_id, failed=missing > 0, was_active=was_active)
        if missing:
            assert outcome.deactivated is self._gave_up(group, batch.member_id, was_active)
        resolved = {ev.offset for ev in outcome.done} | {ev.offset for ev, _ in outcome.dead}
        self.done[group] |= resolved
        newly = {
            off
            for off in resolved
            if all(off in self.done[g] for g in self.holds if off in self.holds[g])
        }
        assert {ev.offset for ev in retired} == newly
        assert newly.isdisjoint(self.retired)
        self.retired |= newly
        if outcome.dead:
            letters = [DeadLetterRecord(group, ev, error) for ev, error in outcome.dead]
            self.store.add_dead_letters("rand", letters)
        kept = [ev.offset for ev in outcome.done if ev.offset not in newly]
        if kept:
            self.store.ack("rand", group, kept)
        if newly:
            self.store.delete("rand", sorted(newly))

    def fail(self, group: str, index: int) -> None:
        if not self.outstanding.get(group):
            return
        batch = self.outstanding[group].pop(index % len(self.outstanding[group]))
        grp = self.core.groups[group]
        was_active = grp.members[batch.member_id].active
        gave_up = grp.fail(batch)
        self._count(group, batch.member_id, failed=True, was_active=was_active)
        assert gave_up is self._gave_up(group, batch.member_id, was_active)

    def kill_and_rebuild(self, replies: list[tuple[str, int, list[str]]]) -> None:
        """kill_queues, then batches in flight may resolve, then the rebuild from the backup."""
        pending = sum(
            len(pq.pending) for g in self.core.groups.values() for pq in g.partitions.values()
        )
        dropped = self.core.kill_queues()
        assert dropped == pending
        assert self.core.lost() == dropped
        for group, index, reply in replies:
            if self.outstanding.get(group):
                self.complete(group, index, reply)
        self.core.rebuild(self.store.load("rand"))
        assert self.core.lost() == 0

    def sweep(self, group: str, dt: float) -> None:
        grp = self.core.groups.get(group)
        if grp is None:
            return
        self.now += dt
        idle_before = {key for key, pq in grp.partitions.items() if pq.idle}
        dropped = grp.sweep_idle(self.now, IDLE_S)
        assert set(dropped) <= idle_before
        assert all(key not in grp.partitions for key in dropped)

    def _count(self, group: str, member_id: str, failed: bool, was_active: bool) -> None:
        if failed:
            self.consecutive[group][member_id] += 1
        else:
            self.consecutive[group][member_id] = 0

    def _gave_up(self, group: str, member_id: str, was_active: bool) -> bool:
        return was_active and self.consecutive[group][member_id] >= MAX_ATTEMPTS

    # -- the checks -----------------------------------------------------------------------
    def check(self) -> None:
        core = self.core
        assert set(core.groups) == set(self.holds)
        for name, grp in core.groups.items():
            outstanding = self.outstanding[name]
            check_group(grp, outstanding)
            pending = [ev for pq in grp.partitions.values() for ev in pq.pending]
            flying = [ev for b in outstanding for ev in b.events]
            pending_offs = {ev.offset for ev in pending}
            flying_offs = {ev.offset for ev in flying}
            assert len(pending_offs) == len(pending)
            assert len(flying_offs) == len(flying), f"{name}: an event in two batches"
            assert pending_offs.isdisjoint(flying_offs)
            assert pending_offs.isdisjoint(self.done[name])
            assert flying_offs.isdisjoint(self.done[name])
            lost = self.holds[name] - pending_offs - flying_offs - self.done[name]
            assert not lost, f"{name} lost {sorted(lost)}"
            extra = (pending_offs | flying_offs | self.done[name]) - self.holds[name]
            assert not extra, f"{name} holds events it should not: {sorted(extra)}"
            assert all(self.events[ev.offset] is ev for ev in pending + flying)
            assert grp.backlog == len(self.holds[name] - self.done[name])
            assert grp.held == grp.backlog
            for member in grp.members.values():
                if member.leaving:
                    assert any(b.member_id == member.member_id for b in outstanding)
        expected_retired = {
            off
            for off in self.events
            if all(off in self.done[g] for g in self.holds if off in self.holds[g])
        }
        assert self.retired == expected_retired
        assert core.accepted_total == len(self.events)
        assert core.acked_total == len(self.retired)
        assert core.unacked == len(self.events) - len(self.retired)
        assert core.lost() == 0
        stored = {ev.offset for ev in self.store.load("rand").events}
        assert stored == set(self.events) - self.retired


# -- a seeded loop ------------------------------------------------------------------------
def random_step(driver: CoreDriver, rng: random.Random) -> None:
    group = rng.choice(GROUPS) if "audit" in driver.core.groups else "default"
    member = rng.choice(MEMBERS)
    op = rng.choices(
        [
            "publish",
            "join",
            "leave",
            "deactivate",
            "offload",
            "take",
            "complete",
            "fail",
            "sweep",
            "kill",
        ],
        weights=[14, 5, 3, 1, 1, 22, 18, 4, 3, 1],
    )[0]
    if op in ("complete", "fail") and not driver.outstanding[group]:
        op = "take"
    if op == "take" and group in driver.core.groups:
        active = [m.member_id for m in driver.core.groups[group].active_members()]
        member = rng.choice(active) if active and rng.random() < 0.9 else member
    if op == "publish":
        specs = [
            (
                rng.choice(PUBLISHERS),
                rng.choice(PARTITIONS),
                rng.choice(TIMESTAMPS) + rng.choice((0.0, 0.0, 10.0 * driver.now)),
                rng.randrange(1000) if rng.random() < 0.15 else None,
            )
            for _ in range(rng.randint(1, 5))
        ]
        driver.publish(specs)
    elif op == "join":
        driver.join(rng.choice(GROUPS), member, rng.choice(PREFETCHES))
    elif op == "leave":
        driver.leave(group, member)
    elif op == "deactivate":
        driver.deactivate(group, member)
    elif op == "offload":
        driver.offload(group, member)
    elif op == "take":
        driver.take(group, member)
    elif op == "complete":
        replies = rng.choices(["ack", "nack", "miss"], weights=[8, 2, 1], k=8)
        driver.complete(group, rng.randrange(8), replies)
    elif op == "fail":
        driver.fail(group, rng.randrange(8))
    elif op == "kill":
        driver.kill_and_rebuild(
            [
                (rng.choice(GROUPS), rng.randrange(8), rng.choices(["ack", "nack", "miss"], k=8))
                for _ in range(rng.randint(0, 2))
            ]
        )
    else:
        driver.sweep(group, rng.choice((1.0, 15.0, 31.0)))


def test_seeded_random_interleavings() -> None:
    for seed in range(200):
        rng = random.Random(seed)
        driver = CoreDriver()
        for step in range(100):
            try:
                random_step(driver, rng)
                driver.check()
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, step {step}: {exc}") from exc


# -- a Hypothesis state machine -----------------------------------------------------------
class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.driver = CoreDriver()

    @rule(
        specs=st.lists(
            st.tuples(
                st.sampled_from(PUBLISHERS),
                st.sampled_from(PARTITIONS),
                st.sampled_from(TIMESTAMPS),
                st.none() | st.integers(0, 50),
            ),
            min_size=1,
            max_size=4,
        )
    )
    def publish(self, specs: list) -> None:
        self.driver.publish(specs)

    @rule(
        group=st.sampled_from(GROUPS),
        member=st.sampled_from(MEMBERS),
        prefetch=st.sampled_from(PREFETCHES),
    )
    def join(self, group: str, member: str, prefetch: int) -> None:
        self.driver.join(group, member, prefetch)

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(MEMBERS))
    def leave(self, group: str, member: str) -> None:
        self.driver.leave(group, member)

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(MEMBERS))
    def take(self, group: str, member: str) -> None:
        self.driver.take(group, member)

    @precondition(lambda self: any(self.driver.outstanding.values()))
    @rule(
        group=st.sampled_from(GROUPS),
        index=st.integers(0, 7),
        replies=st.lists(st.sampled_from(["ack", "ack", "nack", "miss"]), max_size=6),
    )
    def complete(self, group: str, index: int, replies: list[str]) -> None:
        self.driver.complete(group, index, replies)

    @precondition(lambda self: any(self.driver.outstanding.values()))
    @rule(group=st.sampled_from(GROUPS), index=st.integers(0, 7))
    def fail(self, group: str, index: int) -> None:
        self.driver.fail(group, index)

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(MEMBERS))
    def offload(self, group: str, member: str) -> None:
        self.driver.offload(group, member)

    @rule(group=st.sampled_from(GROUPS), dt=st.sampled_from([1.0, 15.0, 31.0]))
    def sweep(self, group: str, dt: float) -> None:
        self.driver.sweep(group, dt)

    @rule(
        replies=st.lists(
            st.tuples(
                st.sampled_from(GROUPS),
                st.integers(0, 7),
                st.lists(st.sampled_from(["ack", "nack", "miss"]), max_size=6),
            ),
            max_size=2,
        )
    )
    def kill_and_rebuild(self, replies: list) -> None:
        self.driver.kill_and_rebuild(replies)

    @invariant()
    def consistent(self) -> None:
        self.driver.check()


CoreMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_core_state_machine = CoreMachine.TestCase
