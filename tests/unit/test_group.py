"""ConsumerGroup: ownership, dispatch, acks and failures, driven without a clock or I/O."""

from __future__ import annotations

import pytest

from channel_server.core.group import Batch, ConsumerGroup
from tests.unit.group_checks import check_group, ids, make_event, owners, pending_ids

P0, P1, P2, P3 = (("p", n) for n in range(4))


def new_group(weight: int = 10, max_attempts: int = 3) -> ConsumerGroup:
    return ConsumerGroup("g", partition_weight=weight, max_attempts=max_attempts)


def take(group: ConsumerGroup, member_id: str) -> Batch:
    batch = group.take_batch(member_id)
    assert batch is not None
    return batch


def ack_all(group: ConsumerGroup, batch: Batch) -> None:
    outcome = group.complete(batch, set(ids(batch.events)), {})
    assert ids(outcome.done) == ids(batch.events)


# -- ownership ----------------------------------------------------------------------------
def test_partition_goes_whole_to_one_member_ties_to_lowest_id() -> None:
    g = new_group()
    g.join("b", "cb-b", 100)
    g.join("a", "cb-a", 100)
    g.enqueue([make_event(i) for i in range(5)])
    assert owners(g) == {P0: "a"}
    assert g.members["a"].partitions == {P0}
    assert g.members["a"].queued == 5
    assert g.ready_members() == {"a"}
    assert g.take_batch("b") is None
    batch = take(g, "a")
    assert ids(batch.events) == ["e0", "e1", "e2", "e3", "e4"]
    assert batch.attempts == [1] * 5
    check_group(g, [batch])


def test_second_partition_goes_to_the_other_member() -> None:
    g = new_group()
    g.join("a", "cb", 100)
    g.join("b", "cb", 100)
    g.enqueue([make_event(0, partition=0)])
    g.enqueue([make_event(1, partition=1)])
    assert owners(g) == {P0: "a", P1: "b"}
    # Everything acked: each still owns one empty partition, which weighs
    # partition_weight (10): a tie, so the third partition goes to "a"; the fourth then
    # goes to "b", since "a" weighs two partitions and one queued event (21 > 10).
    ack_all(g, take(g, "a"))
    ack_all(g, take(g, "b"))
    g.enqueue([make_event(2, partition=2)])
    assert owners(g)[P2] == "a"
    g.enqueue([make_event(3, partition=3)])
    assert owners(g)[P3] == "b"
    check_group(g)


@pytest.mark.parametrize(("weight", "expected"), [(10, "a"), (1, "b")])
def test_partition_weight_against_queued_events(weight: int, expected: str) -> None:
    g = new_group(weight=weight)
    g.join("a", "cb", 100)
    g.join("b", "cb", 100)
    g.enqueue([make_event(i, partition=0) for i in range(5)])  # P0 -> a: 1 partition, 5 events
    g.enqueue([make_event(5, partition=1)])  # P1 -> b
    g.enqueue([make_event(6, partition=2)])  # P2 -> b
    assert owners(g) == {P0: "a", P1: "b", P2: "b"}
    ack_all(g, take(g, "b"))  # b: 2 empty partitions
    # load(a) = w*1 + 5, load(b) = w*2: weight 10 -> a (15 < 20); weight 1 -> b (2 < 6)
    g.enqueue([make_event(7, partition=3)])
    assert owners(g)[P3] == expected
    check_group(g)


def test_events_before_any_member_wait_unowned_then_go_to_the_first() -> None:
    g = new_group()
    g.enqueue([make_event(1, partition=1), make_event(0, partition=0), make_event(2, partition=0)])
    assert owners(g) == {P0: None, P1: None}
    assert g.ready_members() == set()
    assert g.backlog == 3
    assert g.take_batch("nobody") is None
    member = g.join("a", "cb", 100)
    assert owners(g) == {P0: "a", P1: "a"}
    assert member.queued == 3
    batch = take(g, "a")
    assert sorted(ids(batch.events)) == ["e0", "e1", "e2"]
    assert ids(e for e in batch.events if e.key == P0) == ["e0", "e2"]
    check_group(g, [batch])


def test_join_moves_only_idle_partitions_and_keeps_their_order() -> None:
    g = new_group()
    g.join("a", "cb", 2)
    g.enqueue([make_event(i, partition=i % 3) for i in range(9)])
    busy = take(g, "a")  # prefetch 2: one or two partitions in flight
    busy_keys = {ev.key for ev in busy.events}
    before = {key: pending_ids(g, key) for key in g.partitions}
    g.join("b", "cb", 2)
    assert all(owners(g)[key] == "a" for key in busy_keys)
    assert "b" in owners(g).values()
    assert {key: pending_ids(g, key) for key in g.partitions} == before
    check_group(g, [busy])


# -- dispatch -----------------------------------------------------------------------------
def test_take_batch_respects_prefetch() -> None:
    g = new_group()
    g.join("a", "cb", 3)
    g.enqueue([make_event(i, partition=0) for i in range(5)])
    first = take(g, "a")
    assert ids(first.events) == ["e0", "e1", "e2"]
    assert g.take_batch("a") is None
    ack_all(g, first)
    assert ids(take(g, "a").events) == ["e3", "e4"]


def test_prefetch_spans_partitions_and_never_exceeds_free_budget() -> None:
    g = new_group()
    g.join("a", "cb", 3)
    g.enqueue([make_event(i, partition=i % 2) for i in range(4)])  # P0: e0 e2; P1: e1 e3
    first = take(g, "a")
    assert len(first.events) == 3
    assert g.members["a"].in_flight == 3
    assert g.take_batch("a") is None  # budget used up
    check_group(g, [first])
    ack_all(g, first)
    second = take(g, "a")
    assert len(second.events) == 1
    assert sorted(ids(first.events) + ids(second.events)) == ["e0", "e1", "e2", "e3"]


def test_one_unacked_batch_per_partition() -> None:
    g = new_group()
    g.join("a", "cb", 10)
    g.enqueue([make_event(i) for i in range(3)])
    first = take(g, "a")
    g.enqueue([make_event(3), make_event(4)])
    assert g.take_batch("a") is None  # budget left, but P0 is in flight
    assert g.ready_members() == set()
    ack_all(g, first)
    assert g.ready_members() == {"a"}
    assert ids(take(g, "a").events) == ["e3", "e4"]


def test_batch_is_in_timestamp_offset_order_and_wire_form() -> None:
    g = new_group()
    g.join("a", "cb", 10)
    g.enqueue([make_event(0, ts=5.0), make_event(1, ts=1.0), make_event(2, ts=1.0)])
    batch = take(g, "a")
    assert ids(batch.events) == ["e1", "e2", "e0"]
    wire = batch.to_wire()
    assert [w["id"] for w in wire] == ["e1", "e2", "e0"]
    assert [w["attempt"] for w in wire] == [1, 1, 1]
    assert batch.session == 1


def test_inactive_or_unknown_member_gets_nothing() -> None:
    g = new_group()
    g.join("a", "cb", 10)
    g.enqueue([make_event(0)])
    g.deactivate("a")
    assert g.take_batch("a") is None
    assert g.take_batch("zz") is None
    assert owners(g) == {P0: None}


# -- acks ---------------------------------------------------------------------------------
def test_complete_acked_nacked_and_missing() -> None:
    g = new_group()
    g.join("a", "cb", 10)
    g.enqueue([make_event(i) for i in range(4)])
    batch = take(g, "a")
    outcome = g.complete(batch, {"e0", "e3"}, {"e1": "boom"})
    assert ids(outcome.done) == ["e0", "e3"]
    assert ids(outcome.retried) == ["e1", "e2"]
    assert outcome.dead == []
    assert outcome.missing == 1
    member = g.members["a"]
    assert (member.acked, member.failures, member.consecutive_failures) == (2, 1, 1)
    assert member.in_flight == 0
    assert pending_ids(g, P0) == ["e1", "e2"]
    check_group(g)
    again = take(g, "a")
    assert ids(again.events) == ["e1", "e2"]
    assert again.attempts == [2, 2]


def test_full_ack_resets_consecutive_failures() -> None:
    g = new_group(max_attempts=3)
    g.join("a", "cb", 10)
    g.enqueue([make_event(i) for i in range(2)])
    g.complete(take(g, "a"), set(), {})
    g.complete(take(g, "a"), set(), {})
    assert g.members["a"].consecutive_failures == 2
    g.complete(take(g, "a"), {"e0"}, {"e1": "handler error"})  # a nack is not a failure
    assert g.members["a"].consecutive_failures == 0
    assert g.members["a"].active


def test_missing_acks_make_the_member_inactive_and_partitions_move_in_order() -> None:
    g = new_group(max_attempts=3)
    g.join("a", "cb", 100)
    # P0: e0 e3; P1: e1 e4; P2: e2 e5 (timestamps = offsets)
    g.enqueue([make_event(i, partition=i % 3) for i in range(6)])
    first = take(g, "a")
    g.join("b", "cb", 100)  # every partition of "a" is in flight: nothing moves
    g.join("c", "cb", 100)
    assert set(owners(g).values()) == {"a"}
    check_group(g, [first])
    batch = first
    for attempt in (1, 2, 3):
        batch = batch if attempt == 1 else take(g, "a")
        assert len(batch.events) == 6
        assert batch.attempts == [attempt] * 6
        outcome = g.complete(batch, set(), {})
        assert outcome.missing == 6
        assert outcome.deactivated is (attempt == 3)
    member = g.members["a"]
    assert not member.active
    assert member.partitions == set()
    # Oldest work first to the least loaded: P0 -> b (tie), P1 -> c, P2 -> b (tie, lowest).
    assert owners(g) == {P0: "b", P1: "c", P2: "b"}
    assert pending_ids(g, P0) == ["e0", "e3"]
    assert pending_ids(g, P1) == ["e1", "e4"]
    assert pending_ids(g, P2) == ["e2", "e5"]
    check_group(g)
    redelivered = take(g, "b")
    assert redelivered.attempts == [4] * len(redelivered.events)


def test_nacked_event_is_retried_then_dead_lettered() -> None:
    g = new_group(max_attempts=3)
    g.join("a", "cb", 1)
    g.enqueue([make_event(0), make_event(1)])
    for attempt in (1, 2):
        batch = take(g, "a")
        assert (ids(batch.events), batch.attempts) == (["e0"], [attempt])
        outcome = g.complete(batch, set(), {"e0": "poison"})
        assert ids(outcome.retried) == ["e0"]
        assert outcome.missing == 0
    last = take(g, "a")
    assert (ids(last.events), last.attempts) == (["e0"], [3])
    outcome = g.complete(last, set(), {"e0": "poison"})
    assert [(ev.id, err) for ev, err in outcome.dead] == [("e0", "poison")]
    assert outcome.retried == []
    member = g.members["a"]
    assert member.active
    assert member.consecutive_failures == 0
    nxt = take(g, "a")
    assert (ids(nxt.events), nxt.attempts) == (["e1"], [1])
    check_group(g, [nxt])


def test_fail_puts_events_back_in_order() -> None:
    g = new_group(max_attempts=3)
    g.join("a", "cb", 3)
    g.enqueue([make_event(i, ts=10.0 + i) for i in range(4)])
    batch = take(g, "a")
    g.enqueue([make_event(9, ts=10.5), make_event(8, ts=0.0)])  # arrived meanwhile
    assert g.fail(batch) is False
    assert pending_ids(g, P0) == ["e8", "e0", "e9", "e1", "e2", "e3"]
    member = g.members["a"]
    assert (member.failures, member.consecutive_failures, member.in_flight) == (1, 1, 0)
    check_group(g)
    retry = take(g, "a")
    assert ids(retry.events) == ["e8", "e0", "e9"]
    assert retry.attempts == [1, 2, 1]


def test_fail_max_attempts_times_deactivates() -> None:
    g = new_group(max_attempts=2)
    g.join("a", "cb", 10)
    g.join("b", "cb", 10)
    g.enqueue([make_event(0)])
    assert g.fail(take(g, "a")) is False
    assert g.fail(take(g, "a")) is True
    assert not g.members["a"].active
    assert owners(g) == {P0: "b"}
    assert take(g, "b").attempts == [3]


# -- membership ---------------------------------------------------------------------------
def test_leave_without_batch_in_flight() -> None:
    g = new_group()
    g.join("a", "cb", 10)
    g.join("b", "cb", 10)
    g.enqueue([make_event(0, partition=0), make_event(1, partition=0)])
    assert owners(g) == {P0: "a"}
    assert g.leave("a") is True
    assert "a" not in g.members
    assert owners(g) == {P0: "b"}
    assert ids(take(g, "b").events) == ["e0", "e1"]


def test_leave_with_batch_in_flight_goes_when_it_resolves() -> None:
    g = new_group()
    g.join("a", "cb", 10)
    g.join("b", "cb", 10)
    g.enqueue([make_event(0), make_event(1)])
    batch = take(g, "a")
    assert g.leave("a") is False
    assert "a" in g.members
    assert not g.members["a"].active
    assert g.take_batch("a") is None
    assert owners(g) == {P0: "a"}  # kept for its batch in flight
    outcome = g.complete(batch, {"e0"}, {})
    assert ids(outcome.retried) == ["e1"]
    assert "a" not in g.members
    assert owners(g) == {P0: "b"}
    assert ids(take(g, "b").events) == ["e1"]


def two_members_a_owning_two_partitions() -> tuple[ConsumerGroup, Batch]:
    """ "a" owns P0 and P2, "b" owns P1; "a" has one of its partitions in flight."""
    g = new_group()
    g.join("a", "cb", 1)
    g.join("b", "cb", 1)
    g.enqueue([make_event(0, partition=0)])  # tie -> a
    g.enqueue([make_event(1, partition=1)])  # -> b (a weighs 11)
    g.enqueue([make_event(2, partition=2)])  # tie at 11 -> a
    assert owners(g) == {P0: "a", P1: "b", P2: "a"}
    batch = take(g, "a")
    assert len(batch.events) == 1
    return g, batch


def test_leave_with_batch_in_flight_releases_its_other_partitions() -> None:
    g, batch = two_members_a_owning_two_partitions()
    waiting = P2 if batch.events[0].key == P0 else P0
    assert g.leave("a") is False
    check_group(g, [batch])  # the waiting partition must not stay with a leaving member
    assert owners(g)[waiting] == "b"


def test_partition_of_departed_member_keeps_receiving_events() -> None:
    g, batch = two_members_a_owning_two_partitions()
    waiting = P2 if batch.events[0].key == P0 else P0
    g.leave("a")
    g.complete(batch, set(ids(batch.events)), {})
    assert "a" not in g.members
    check_group(g)
    g.enqueue([make_event(3, partition=waiting[1])])  # to the partition "a" owned
    assert owners(g)[waiting] == "b"
    assert g.ready_members() == {"b"}


def test_join_with_same_id_resumes() -> None:
    g = new_group(max_attempts=1)
    first = g.join("a", "cb-1", 5)
    g.enqueue([make_event(0)])
    g.fail(take(g, "a"))
    assert not first.active
    assert owners(g) == {P0: None}
    again = g.join("a", "cb-2", 7)
    assert again is first
    assert (again.session, again.callback, again.prefetch) == (2, "cb-2", 7)
    assert again.active and again.consecutive_failures == 0
    assert owners(g) == {P0: "a"}
    batch = take(g, "a")
    assert (batch.session, batch.attempts) == (2, [2])


def test_rejoin_while_leaving_cancels_the_leave() -> None:
    g = new_group()
    g.join("a", "cb", 10)
    g.enqueue([make_event(0)])
    batch = take(g, "a")
    assert g.leave("a") is False
    g.join("a", "cb", 10)
    ack_all(g, batch)
    assert "a" in g.members and g.members["a"].active


# -- housekeeping -------------------------------------------------------------------------
def test_sweep_idle_drops_only_idle_partitions_after_idle_s() -> None:
    g = new_group()
    g.join("a", "cb", 10)
    g.enqueue([make_event(0, partition=0), make_event(1, partition=1), make_event(2, partition=2)])
    batch = take(g, "a")
    for ev in batch.events:  # P0 done, P1 stays in flight
        assert ev.key in (P0, P1, P2)
    g.complete(batch, {"e0", "e2"}, {})  # P1's e1 goes back: pending
    in_flight = take(g, "a")
    assert ids(in_flight.events) == ["e1"]
    assert g.sweep_idle(now=100.0, idle_s=30.0) == []  # starts P0's and P2's idle clocks
    assert g.sweep_idle(now=129.9, idle_s=30.0) == []
    g.enqueue([make_event(3, partition=2)])  # P2 busy again: its clock restarts
    assert sorted(g.sweep_idle(now=130.0, idle_s=30.0)) == [P0]
    assert P0 not in g.partitions
    assert P0 not in g.members["a"].partitions
    assert set(g.partitions) == {P1, P2}
    check_group(g, [in_flight])
    g.complete(in_flight, {"e1"}, {})
    ack_all(g, take(g, "a"))
    assert g.sweep_idle(now=500.0, idle_s=30.0) == []
    assert sorted(g.sweep_idle(now=530.0, idle_s=30.0)) == [P1, P2]
    assert g.partitions == {}
    assert g.members["a"].partitions == set()


def test_offload_moves_waiting_partitions_but_not_in_flight_ones() -> None:
    g, busy = two_members_a_owning_two_partitions()
    kept = busy.events[0].key
    waiting = P2 if kept == P0 else P0
    assert g.offload("a") == [waiting]
    assert g.members["a"].active
    assert owners(g) == {kept: "a", P1: "b", waiting: "b"}
    check_group(g, [busy])


def test_offload_keeps_work_when_nobody_else_is_active() -> None:
    g = new_group()
    g.join("a", "cb", 10)
    g.enqueue([make_event(0, partition=0), make_event(1, partition=1)])
    assert g.offload("a") == []
    assert owners(g) == {P0: "a", P1: "a"}
    check_group(g)


def test_rebalance_goes_on_when_partitions_become_idle() -> None:
    # a owns four partitions, all in flight when b joins: b gets nothing yet.
    g = new_group()
    g.join("a", "cb", 100)
    g.enqueue([make_event(i, partition=i % 4) for i in range(8)])
    busy = take(g, "a")
    assert {ev.key for ev in busy.events} == {P0, P1, P2, P3}
    g.join("b", "cb", 100)
    assert set(owners(g).values()) == {"a"}
    # once a's batch is acknowledged its partitions are idle and the join's share moves.
    ack_all(g, busy)
    g.enqueue([make_event(i, partition=i % 4) for i in range(8, 12)])
    moved = g.rebalance()
    assert len(moved) == 2
    assert sorted(owners(g).values()) == ["a", "a", "b", "b"]
    assert g.rebalance() == []  # balanced: nothing more moves
    check_group(g)


def test_an_offloaded_member_is_not_rebalanced_work_until_fast_again() -> None:
    g = new_group()
    g.join("a", "cb", 1)
    g.join("b", "cb", 1)
    g.enqueue([make_event(i, partition=i % 6) for i in range(12)])
    assert sorted(owners(g).values()) == ["a"] * 3 + ["b"] * 3
    busy = take(g, "a")
    assert len(g.offload("a")) == 2  # its two waiting partitions go to b
    ack_all(g, busy)
    g.enqueue([make_event(i, partition=i % 6) for i in range(12, 18)])
    assert g.rebalance() == []  # b owns 5, a 1: still nothing goes back to slow a
    g.members["a"].offloaded = False  # a fast push clears the mark (the facade does it)
    assert len(g.rebalance()) == 2
    assert sorted(owners(g).values()) == ["a"] * 3 + ["b"] * 3
    check_group(g)


def test_ready_short_means_a_batch_could_go_but_not_a_full_one() -> None:
    g = new_group()
    g.join("a", "cb-a", 4)
    assert not g.ready_short("a")  # nothing ready
    g.enqueue([make_event(i) for i in range(2)])
    assert g.ready_short("a")  # 2 ready, room for 4: worth lingering
    g.enqueue([make_event(i) for i in range(2, 4)])
    assert not g.ready_short("a")  # a full batch is ready
    batch = take(g, "a")
    g.enqueue([make_event(4)])
    assert not g.ready_short("a")  # its only partition is in flight: not ready
    ack_all(g, batch)
    assert g.ready_short("a")
    g.deactivate("a")
    assert not g.ready_short("a")
    assert not g.ready_short("nobody")
