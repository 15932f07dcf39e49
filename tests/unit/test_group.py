"""ConsumerGroup: ownership, delivery, acks, failures and liveness, on a fake clock."""

from __future__ import annotations

import pytest

from channel_server.core import health, rebalance
from channel_server.core.group import ConsumerGroup, GroupPolicy
from channel_server.core.member import Batch, WindowPolicy
from tests.unit.group_checks import check_group, ids, make_event, owners, pending_ids, uids

P0, P1, P2, P3 = (("p", n) for n in range(4))


class Driver:
    """A group driven like the channel facade drives it: sessions and a fake clock."""

    def __init__(self, weight: int = 10, max_attempts: int = 3, window: int = 1000) -> None:
        policy = GroupPolicy(
            partition_weight=weight, max_attempts=max_attempts, window=WindowPolicy(window)
        )
        self.g = ConsumerGroup("g", policy)
        self.now = 0.0
        self._session = 0

    def join(self, member_id: str, prefetch: int = 100, callback: str = "cb", pull: bool = False):
        self._session += 1
        return self.g.join(member_id, callback, prefetch, self._session, self.now, pull)

    def take(self, member_id: str) -> Batch:
        batch = self.g.take_batch(member_id, self.now)
        assert batch is not None
        return batch

    def ack(self, batch: Batch, acked=None, nacked=None, through: int | None = None):
        acked = uids(batch.events) if acked is None else acked
        last = batch.first_seq + len(batch.events) - 1
        return self.g.acknowledge(
            batch.member_id,
            batch.session,
            acked,
            nacked or {},
            last if through is None else through,
            self.now,
        )


# -- ownership ----------------------------------------------------------------------------
def test_partition_goes_whole_to_one_member_ties_to_lowest_id() -> None:
    d = Driver()
    d.join("b")
    d.join("a")
    d.g.enqueue([make_event(i) for i in range(5)])
    assert owners(d.g) == {P0: "a"}
    assert d.g.members["a"].queued == 5
    assert d.g.ready_members() == {"a"}
    assert d.g.take_batch("b", d.now) is None
    batch = d.take("a")
    assert ids(batch.events) == ["e0", "e1", "e2", "e3", "e4"]
    assert batch.attempts == [1] * 5
    assert (batch.first_seq, batch.group) == (1, "g")
    check_group(d.g)


def test_second_partition_goes_to_the_other_member() -> None:
    d = Driver()
    d.join("a")
    d.join("b")
    d.g.enqueue([make_event(0, partition=0)])
    d.g.enqueue([make_event(1, partition=1)])
    assert owners(d.g) == {P0: "a", P1: "b"}
    # Everything acked: each still owns one empty partition, which weighs
    # partition_weight (10): a tie, so the third partition goes to "a"; the fourth then
    # goes to "b", since "a" weighs two partitions and one queued event (21 > 10).
    d.ack(d.take("a"))
    d.ack(d.take("b"))
    d.g.enqueue([make_event(2, partition=2)])
    assert owners(d.g)[P2] == "a"
    d.g.enqueue([make_event(3, partition=3)])
    assert owners(d.g)[P3] == "b"
    check_group(d.g)


@pytest.mark.parametrize(("weight", "expected"), [(10, "a"), (1, "b")])
def test_partition_weight_against_queued_events(weight: int, expected: str) -> None:
    d = Driver(weight=weight)
    d.join("a")
    d.join("b")
    d.g.enqueue([make_event(i, partition=0) for i in range(5)])  # P0 -> a: 1 partition, 5 events
    d.g.enqueue([make_event(5, partition=1)])  # P1 -> b
    d.g.enqueue([make_event(6, partition=2)])  # P2 -> b
    assert owners(d.g) == {P0: "a", P1: "b", P2: "b"}
    d.ack(d.take("b"))  # b: 2 empty partitions
    # load(a) = w*1 + 5, load(b) = w*2: weight 10 -> a (15 < 20); weight 1 -> b (2 < 6)
    d.g.enqueue([make_event(7, partition=3)])
    assert owners(d.g)[P3] == expected
    check_group(d.g)


def test_events_before_any_member_wait_unowned_then_go_to_the_first() -> None:
    d = Driver()
    d.g.enqueue([make_event(1, partition=1), make_event(0, partition=0), make_event(2)])
    assert owners(d.g) == {P0: None, P1: None}
    assert d.g.ready_members() == set()
    assert d.g.backlog == 3
    assert d.g.take_batch("nobody", d.now) is None
    member = d.join("a")
    assert owners(d.g) == {P0: "a", P1: "a"}
    assert member.queued == 3
    batch = d.take("a")
    assert sorted(ids(batch.events)) == ["e0", "e1", "e2"]
    assert ids(e for e in batch.events if e.key == P0) == ["e0", "e2"]
    check_group(d.g)


def test_join_moves_only_movable_partitions_and_keeps_their_order() -> None:
    d = Driver()
    d.join("a", prefetch=2)
    d.g.enqueue([make_event(i, partition=i % 3) for i in range(9)])
    busy = d.take("a")  # prefetch 2: one or two partitions in flight
    busy_keys = {ev.key for ev in busy.events}
    before = {key: pending_ids(d.g, key) for key in d.g.partitions}
    d.join("b", prefetch=2)
    assert all(owners(d.g)[key] == "a" for key in busy_keys)
    assert "b" in owners(d.g).values()
    assert {key: pending_ids(d.g, key) for key in d.g.partitions} == before
    check_group(d.g)


# -- delivery -----------------------------------------------------------------------------
def test_take_batch_respects_prefetch_and_room_comes_back_with_acks() -> None:
    d = Driver()
    d.join("a", prefetch=3)
    d.g.enqueue([make_event(i, partition=i % 2) for i in range(5)])  # P0: e0 e2 e4; P1: e1 e3
    first = d.take("a")
    assert len(first.events) == 3
    assert d.g.members["a"].room == 0
    assert d.g.take_batch("a", d.now) is None
    assert not d.g.has_ready("a")
    d.ack(first, acked=[first.events[0].uid], through=first.first_seq)  # one event done
    assert d.g.members["a"].room == 1
    check_group(d.g)


def test_a_full_member_owing_events_in_flight_has_nothing_ready_for_another_partition() -> None:
    """The member owes an event whose ack was skipped, but its partition still has events
    in flight (not ready), and another partition's events need room it lacks: nothing to
    take, so nothing ready (a push task asked again at once while the flights lasted)."""
    d = Driver()
    d.join("a", prefetch=4)
    d.g.enqueue([make_event(i, partition=0) for i in range(4)])
    first = d.take("a")
    d.g.enqueue([make_event(10, partition=1)])
    out = d.ack(first, acked=[], through=first.first_seq)  # the first event's ack was lost
    member = d.g.members["a"]
    assert (out.missing, member.owed, member.room, list(member.ready)) == (1, 1, 0, [P1])
    assert d.g.take_batch("a", d.now) is None
    assert not d.g.has_ready("a")
    d.ack(first, acked=uids(first.events[1:]), through=first.first_seq + 3)
    assert d.g.has_ready("a")  # room again, and the owed event's partition is ready
    assert sorted(ids(d.take("a").events)) == ["e0", "e10"]
    check_group(d.g)


def test_one_delivery_per_partition_until_every_event_is_resolved() -> None:
    d = Driver()
    d.join("a", prefetch=10)
    d.g.enqueue([make_event(i) for i in range(3)])
    first = d.take("a")
    d.g.enqueue([make_event(3), make_event(4)])
    assert d.g.take_batch("a", d.now) is None  # room left, but P0 is in flight
    d.ack(first, acked=["p/e0", "p/e1"], through=first.first_seq + 1)
    assert d.g.take_batch("a", d.now) is None  # e2 still held
    d.ack(first, acked=["p/e2"], through=first.first_seq + 2)
    assert ids(d.take("a").events) == ["e3", "e4"]
    check_group(d.g)


def test_batch_is_in_timestamp_offset_order_and_wire_form() -> None:
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(0, ts=5.0), make_event(1, ts=1.0), make_event(2, ts=1.0)])
    batch = d.take("a")
    assert ids(batch.events) == ["e1", "e2", "e0"]
    wire = batch.to_wire()
    assert (wire["session"], wire["seq"]) == (batch.session, 1)
    assert [w["id"] for w in wire["events"]] == ["e1", "e2", "e0"]
    assert [w["attempt"] for w in wire["events"]] == [1, 1, 1]


def test_inactive_or_unknown_member_gets_nothing() -> None:
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(0)])
    d.g.deactivate("a", "test")
    assert d.g.take_batch("a", d.now) is None
    assert d.g.take_batch("zz", d.now) is None
    assert owners(d.g) == {P0: None}
    assert d.g.deactivations == [("a", "test")]


def test_ready_partitions_are_served_round_robin() -> None:
    d = Driver()
    d.join("a", prefetch=1)
    d.g.enqueue([make_event(i, partition=i % 3) for i in range(6)])
    served = []
    for _ in range(6):
        batch = d.take("a")
        served.append(batch.events[0].key)
        d.ack(batch)
    assert served == [P0, P1, P2, P0, P1, P2]


# -- acks ---------------------------------------------------------------------------------
def test_ack_acked_nacked_and_skipped() -> None:
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(i) for i in range(5)])
    batch = d.take("a")
    # e0, e3 acked, e1 nacked, e2 skipped (the message covers up to e3), e4 still held.
    outcome = d.ack(
        batch, acked=["p/e0", "p/e3"], nacked={"p/e1": "boom"}, through=batch.first_seq + 3
    )
    assert ids(outcome.done) == ["e0", "e3"]
    assert sorted(ids(outcome.retried)) == ["e1", "e2"]
    assert (outcome.missing, outcome.dead, outcome.stale) == (1, [], False)
    member = d.g.members["a"]
    assert (member.acked, member.failures, member.ack_failures, member.in_flight) == (2, 1, 1, 1)
    assert pending_ids(d.g, P0) == ["e1", "e2"]
    check_group(d.g)
    d.ack(batch, acked=["p/e4"], through=batch.first_seq + 4)
    again = d.take("a")
    assert ids(again.events) == ["e1", "e2"]
    assert again.attempts == [2, 2]
    assert again.first_seq == batch.first_seq + 5


def test_ack_messages_of_ranges_that_arrive_out_of_order_skip_only_their_own() -> None:
    """A reply's acks and the control thread's next message may overtake each other: each
    names its range of seqs, so the later one arriving first skips nothing of the earlier
    one's (under the prefix rule it would send e0-e2 back as lost acks)."""
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(i) for i in range(6)])
    batch = d.take("a")
    first = batch.first_seq
    later = d.g.acknowledge("a", batch.session, ["p/e3", "p/e5"], {}, first + 5, d.now, first + 3)
    assert ids(later.done) == ["e3", "e5"]
    assert (ids(later.retried), later.missing) == (["e4"], 1)  # skipped: in its range
    earlier = d.g.acknowledge(
        "a", batch.session, ["p/e0", "p/e1", "p/e2"], {}, first + 2, d.now, first
    )
    assert ids(earlier.done) == ["e0", "e1", "e2"]
    assert (earlier.retried, earlier.missing) == ([], 0)
    assert d.g.members["a"].acked == 5
    check_group(d.g)


def test_a_declined_push_keeps_what_the_member_owed_for_its_last_ack() -> None:
    """A stopping member declines the push that brought its skipped events back; its
    goodbye ack names them as processed (by uid), and they are done, not handed on."""
    d = Driver()
    d.join("a")
    d.join("b")
    d.g.enqueue([make_event(0), make_event(1)])
    batch = d.take("a")
    d.ack(batch, acked=[], through=batch.first_seq + 1)  # both processed, the ack lost
    again = d.take("a")  # they go back to a, which owes them
    assert ids(again.events) == ["e0", "e1"]
    d.g.push_declined(again, now=0.0, pause_s=1.0)
    check_group(d.g)
    assert d.g.members["a"].owed == 2
    goodbye = d.g.acknowledge("a", again.session, ["p/e0", "p/e1"], {}, 0, 0.0)
    assert ids(goodbye.done) == ["e0", "e1"]
    d.g.leave("a")
    assert d.g.take_batch("b", 0.0) is None  # nothing of it goes to b
    check_group(d.g)


def test_a_clean_ack_resets_the_ack_failures() -> None:
    d = Driver(max_attempts=3)
    d.join("a")
    d.g.enqueue([make_event(i) for i in range(2)])
    d.ack(d.take("a"), acked=[])
    d.ack(d.take("a"), acked=[])
    assert d.g.members["a"].ack_failures == 2
    d.ack(d.take("a"), acked=["p/e0"], nacked={"p/e1": "handler error"})  # a nack is no failure
    assert d.g.members["a"].ack_failures == 0
    assert d.g.members["a"].active


def test_a_stale_ack_still_counts_for_what_the_member_may_have_done() -> None:
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(0), make_event(1)])
    batch = d.take("a")
    d.join("a")  # a new session (a resubscribe): what the old one held went back, held
    assert pending_ids(d.g, P0) == ["e0", "e1"]
    assert d.g.partitions[P0].held_back == {0, 1} and not d.g.partitions[P0].movable
    outcome = d.ack(batch, acked=["p/e0"])  # the old session's ack, late
    assert outcome.stale and ids(outcome.done) == ["e0"]
    assert pending_ids(d.g, P0) == ["e1"]
    assert d.g.partitions[P0].held_back == {1}
    again = d.take("a")
    assert (ids(again.events), again.attempts, again.first_seq) == (["e1"], [2], 1)
    check_group(d.g)


def test_a_stale_ack_of_events_that_moved_on_changes_nothing() -> None:
    d = Driver(max_attempts=1)
    d.join("a")
    d.join("b")
    d.g.enqueue([make_event(0)])
    batch = d.take("a")
    d.g.push_failed(batch, d.now)  # a is declared dead: e0 goes to b
    outcome = d.ack(batch)
    assert outcome.stale and outcome.done == []
    assert owners(d.g) == {P0: "b"} and pending_ids(d.g, P0) == ["e0"]
    check_group(d.g)


def test_missing_acks_make_the_member_inactive_and_partitions_move_in_order() -> None:
    d = Driver(max_attempts=3)
    d.join("a")
    # P0: e0 e3; P1: e1 e4; P2: e2 e5 (timestamps = offsets)
    d.g.enqueue([make_event(i, partition=i % 3) for i in range(6)])
    first = d.take("a")
    d.join("b")  # every partition of "a" is in flight: nothing moves
    d.join("c")
    assert set(owners(d.g).values()) == {"a"}
    batch = first
    for attempt in (1, 2, 3):
        batch = batch if attempt == 1 else d.take("a")
        assert len(batch.events) == 6
        assert batch.attempts == [attempt] * 6
        outcome = d.ack(batch, acked=[])
        assert outcome.missing == 6
        assert outcome.deactivated is (attempt == 3)
    member = d.g.members["a"]
    assert not member.active and not member.partitions
    assert member.inactive_reason == "acks missing 3 times in a row"
    # Oldest work first to the least loaded: P0 -> b (tie), P1 -> c, P2 -> b (tie, lowest).
    assert owners(d.g) == {P0: "b", P1: "c", P2: "b"}
    assert pending_ids(d.g, P0) == ["e0", "e3"]
    assert pending_ids(d.g, P2) == ["e2", "e5"]
    check_group(d.g)
    assert d.take("b").attempts == [4] * 4


def test_nacked_event_is_retried_then_dead_lettered() -> None:
    d = Driver(max_attempts=3)
    d.join("a", prefetch=1)
    d.g.enqueue([make_event(0), make_event(1)])
    for attempt in (1, 2):
        batch = d.take("a")
        assert (ids(batch.events), batch.attempts) == (["e0"], [attempt])
        outcome = d.ack(batch, acked=[], nacked={"p/e0": "poison"})
        assert ids(outcome.retried) == ["e0"] and outcome.missing == 0
    last = d.take("a")
    outcome = d.ack(last, acked=[], nacked={"p/e0": "poison"})
    assert [(ev.id, err) for ev, err in outcome.dead] == [("e0", "poison")]
    assert d.g.members["a"].active and d.g.held == 1
    nxt = d.take("a")
    assert (ids(nxt.events), nxt.attempts) == (["e1"], [1])
    check_group(d.g)


def test_events_returned_after_a_failure_go_back_behind_it_counting_against_nobody() -> None:
    """The subscriber gives back the rest of a partition whose event failed: the next
    push of the partition starts at the failed event, in order; the returned events
    gain no handler failure and the member no failed attempt."""
    d = Driver(max_attempts=2)
    d.join("a")
    d.g.enqueue([make_event(i) for i in range(4)])
    batch = d.take("a")
    first = batch.first_seq
    outcome = d.g.acknowledge(
        "a", batch.session, ["p/e0"], {"p/e1": "boom"}, first + 3, d.now, first, ["p/e2", "p/e3"]
    )
    assert (ids(outcome.done), ids(outcome.retried)) == (["e0"], ["e1", "e2", "e3"])
    assert (outcome.missing, outcome.dead) == (0, [])
    member = d.g.members["a"]
    assert (member.failures, member.ack_failures, member.in_flight) == (0, 0, 0)
    assert pending_ids(d.g, P0) == ["e1", "e2", "e3"]
    check_group(d.g)
    again = d.take("a")
    # e1 is its second attempt; e2 and e3 never ran, so their next one is still their first
    # (they reached a handler at attempt 4 without a failure: session 33's operator probe)
    assert (ids(again.events), again.attempts) == (["e1", "e2", "e3"], [2, 1, 1])
    # e1 fails its last attempt: dead; e2 and e3 were never tried, so they are not
    last = d.g.acknowledge(
        "a",
        again.session,
        [],
        {"p/e1": "boom"},
        again.first_seq + 2,
        d.now,
        again.first_seq,
        ["p/e2", "p/e3"],
    )
    assert [ev.id for ev, _ in last.dead] == ["e1"]
    after = d.take("a")
    assert (ids(after.events), after.attempts) == (["e2", "e3"], [1, 1])
    check_group(d.g)


def test_failed_push_puts_events_back_in_order_and_backs_off() -> None:
    d = Driver(max_attempts=3)
    d.join("a", prefetch=3)
    d.g.enqueue([make_event(i, ts=10.0 + i) for i in range(4)])
    batch = d.take("a")
    d.g.enqueue([make_event(9, ts=10.5), make_event(8, ts=0.0)])  # arrived meanwhile
    assert d.g.push_failed(batch, d.now) is False
    assert pending_ids(d.g, P0) == ["e8", "e0", "e9", "e1", "e2", "e3"]
    member = d.g.members["a"]
    assert (member.failures, member.transport_failures, member.in_flight) == (1, 1, 0)
    assert member.retry_at == pytest.approx(0.05)
    assert d.g.take_batch("a", d.now) is None  # backing off
    # The push may have arrived: a owes those three (its window of 3 is full), and they
    # stay with it; the two that came meanwhile go along only because they are older.
    assert (member.owed, member.room, d.g.partitions[P0].movable) == (3, 0, False)
    d.now = 0.05
    retry = d.take("a")
    assert ids(retry.events) == ["e8", "e0", "e9", "e1", "e2"]
    assert retry.attempts == [1, 2, 1, 2, 2]
    assert member.owed == 0
    assert d.g.delivered(retry, d.now)
    assert member.transport_failures == 0
    check_group(d.g)


def test_failed_pushes_max_attempts_times_deactivate() -> None:
    d = Driver(max_attempts=2)
    d.join("a")
    d.join("b")
    d.g.enqueue([make_event(0)])
    assert d.g.push_failed(d.take("a"), d.now) is False
    d.now = 1.0
    assert d.g.push_failed(d.take("a"), d.now) is True
    assert not d.g.members["a"].active
    assert owners(d.g) == {P0: "b"}
    assert d.take("b").attempts == [3]
    stale = Batch("g", "a", 99, 1, [], [])
    assert d.g.push_failed(stale, d.now) is False and not d.g.delivered(stale, d.now)


def test_a_leaving_member_declines_a_push_without_failing() -> None:
    d = Driver(max_attempts=1)
    d.join("a")
    d.g.enqueue([make_event(0), make_event(1)])
    batch = d.take("a")
    d.g.push_declined(batch, d.now, pause_s=1.0)
    member = d.g.members["a"]
    assert member.active and (member.failures, member.owed, member.in_flight) == (0, 0, 0)
    assert member.retry_at == 1.0 and d.g.take_batch("a", d.now) is None
    assert pending_ids(d.g, P0) == ["e0", "e1"] and d.g.partitions[P0].movable
    check_group(d.g)


def test_a_leaving_member_hands_its_queued_partitions_on_but_keeps_the_one_in_hand() -> None:
    """A graceful stop finishes the event in hand first: the rest of its work waited for
    that whole job, another member idle (session 34's newcomer)."""
    d = Driver()
    d.join("a", prefetch=2)
    d.g.enqueue([make_event(0, partition=0)])
    in_hand = d.take("a")  # a's long job
    d.g.enqueue([make_event(1, partition=1)])
    queued = d.take("a")  # pushed behind it, declined: a is stopping
    d.join("b", prefetch=1)  # idle: nothing of a's is movable yet
    d.g.push_declined(queued, d.now, pause_s=1.0)
    assert rebalance.leaving(d.g, "a") == [queued.events[0].key]
    assert owners(d.g) == {in_hand.events[0].key: "a", queued.events[0].key: "b"}
    assert d.g.offloads == [("a", 1, "leaving")]
    assert d.g.members["a"].offloads == 0  # not counted as slowness
    assert d.take("b").events == queued.events
    check_group(d.g)


# -- membership ---------------------------------------------------------------------------
def test_leave_hands_back_what_the_member_held_at_once() -> None:
    d = Driver()
    d.join("a")
    d.join("b")
    d.g.enqueue([make_event(0), make_event(1)])
    batch = d.take("a")
    d.ack(batch, acked=["p/e0"], through=batch.first_seq)
    d.g.leave("a")
    assert "a" not in d.g.members
    assert owners(d.g) == {P0: "b"}
    assert ids(d.take("b").events) == ["e1"]
    check_group(d.g)


def test_a_resumed_active_member_keeps_its_partitions_and_gets_its_events_again() -> None:
    d = Driver()
    d.join("a", callback="cb-1")
    d.join("b")
    d.g.enqueue([make_event(0), make_event(1)])
    batch = d.take("a")
    again = d.join("a", prefetch=7, callback="cb-2")
    assert (again.callback, again.prefetch, again.active) == ("cb-2", 7, True)
    assert owners(d.g) == {P0: "a"}
    redelivered = d.take("a")  # its last life ended holding them: the first goes alone
    assert ids(redelivered.events) == ids(batch.events[:1])
    assert redelivered.session == batch.session + 2  # b joined in between
    d.ack(redelivered)
    assert ids(d.take("a").events) == ids(batch.events[1:])
    check_group(d.g)


def test_an_inactive_member_rejoins_with_a_new_session() -> None:
    d = Driver(max_attempts=1)
    first = d.join("a")
    d.g.enqueue([make_event(0)])
    d.g.push_failed(d.take("a"), d.now)
    assert not first.active and owners(d.g) == {P0: None}
    again = d.join("a")
    assert again is first and again.active and again.transport_failures == 0
    assert owners(d.g) == {P0: "a"}
    assert d.take("a").attempts == [2]


# -- liveness -----------------------------------------------------------------------------
def test_silent_stuck_and_idle_pull_members_are_found_by_the_clock() -> None:
    d = Driver()
    d.join("push")
    d.join("puller", prefetch=1, pull=True)
    d.join("idle")
    d.g.enqueue([make_event(0, partition=0)])
    d.g.enqueue([make_event(1, partition=1)])
    holder = next(m for m in ("push", "puller", "idle") if d.g.members[m].partitions)
    d.take(holder)
    d.now = 6.0
    assert health.silent(d.g, d.now, 5.0) == ([holder] if holder != "puller" else [])
    assert health.idle_pullers(d.g, d.now, 5.0) == ["puller"]
    d.g.heartbeat(holder, d.now)
    assert health.silent(d.g, d.now, 5.0) == []
    assert health.stuck(d.g, d.now, 5.0) == [holder]  # a heartbeat does not finish a handler
    assert health.stuck(d.g, d.now, 10.0) == []


def test_probes_count_like_failed_pushes() -> None:
    d = Driver(max_attempts=2)
    d.join("a")
    d.g.enqueue([make_event(0)])
    d.take("a")
    assert d.g.probe_failed("a", d.now) is False
    d.g.probe_answered("a", d.now)
    assert d.g.members["a"].transport_failures == 0
    assert d.g.probe_failed("a", d.now) is False
    assert d.g.probe_failed("a", d.now) is True
    assert d.g.members["a"].inactive_reason == "no answer to pings, 2 failures in a row"
    assert pending_ids(d.g, P0) == ["e0"]


# -- restart ------------------------------------------------------------------------------
def test_a_restored_partition_stays_with_its_owner_until_its_events_are_resolved() -> None:
    d = Driver()
    d.join("a", prefetch=1)
    d.g.restore_owner(P0, "a")
    d.g.enqueue([make_event(i) for i in range(3)])
    d.g.pin_restored(below_offset=3)
    d.g.enqueue([make_event(3)])  # published after the restart
    d.join("b")  # a rejoin or a newcomer: a rebalance would take an idle partition
    assert owners(d.g) == {P0: "a"}
    for n in range(3):
        assert d.g.partitions[P0].pinned == 3 - n
        d.ack(d.take("a"))
        rebalance.rebalance(d.g)
        assert owners(d.g) == {P0: "a"}, n
    assert d.g.partitions[P0].pinned == 0
    assert d.g.partitions[P0].movable
    check_group(d.g)


def test_a_pinned_partition_moves_when_its_owner_is_declared_dead() -> None:
    d = Driver()
    d.join("a")
    d.join("b")
    d.g.restore_owner(P0, "a")
    d.g.enqueue([make_event(0)])
    d.g.pin_restored(below_offset=1)
    d.g.deactivate("a", "no answer")
    assert owners(d.g) == {P0: "b"}
    assert d.g.partitions[P0].pinned == 0


# -- rebalancing --------------------------------------------------------------------------
def test_rebalance_goes_on_when_partitions_become_movable() -> None:
    # a owns four partitions, all in flight when b joins: b gets nothing yet.
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(i, partition=i % 4) for i in range(8)])
    busy = d.take("a")
    assert {ev.key for ev in busy.events} == {P0, P1, P2, P3}
    d.join("b")
    assert set(owners(d.g).values()) == {"a"}
    d.ack(busy)  # its partitions are movable now: the join's share moves
    assert sorted(owners(d.g).values()) == ["a", "a", "b", "b"]
    assert rebalance.rebalance(d.g) == []  # balanced: nothing more moves
    check_group(d.g)


def test_counts_that_load_based_assignment_left_uneven_are_not_evened_after_acks() -> None:
    """New partitions go to the least loaded member, so a busy member may own fewer;
    evening the counts after every ack would move idle partitions back and forth (each
    move written to the store). Only a join's rebalance is carried on."""
    d = Driver()
    d.join("a")
    d.join("b")
    assert rebalance.rebalance(d.g) == [] and not d.g.rebalancing  # the joins' are done
    d.g.enqueue([make_event(i, partition=0) for i in range(50)])  # a: load 10 + 50
    d.g.enqueue([make_event(50 + n, partition=n) for n in (1, 2, 3)])  # each to b
    assert owners(d.g) == {P0: "a", P1: "b", P2: "b", P3: "b"}
    d.ack(d.take("b"))  # b's three partitions are idle, two ahead of a: they stay
    assert owners(d.g) == {P0: "a", P1: "b", P2: "b", P3: "b"}
    d.join("c")  # a join evens the counts out
    assert sorted(owners(d.g).values()) == ["a", "b", "b", "c"]
    check_group(d.g)


def test_an_idle_member_steals_a_ready_partition_from_a_busy_one() -> None:
    d = Driver(window=1)
    d.join("a", prefetch=1)
    d.join("b", prefetch=1)
    d.g.enqueue([make_event(i, partition=i % 3) for i in range(6)])
    assert sorted(owners(d.g).values()) == ["a", "a", "b"]
    b_batch = d.take("b")
    a_batch = d.take("a")  # a holds one event; its other partition waits behind it
    d.ack(b_batch)
    d.ack(d.take("b"))  # b's partition is drained: b is idle and steals a's waiting one
    assert sorted(owners(d.g).values()) == ["a", "b", "b"]
    assert owners(d.g)[a_batch.events[0].key] == "a"
    check_group(d.g)


def test_an_idle_member_does_not_steal_from_a_busy_one_with_room_for_its_ready_work() -> None:
    """The busy member's ready partition is only waiting for its push (a linger for the
    ack of what it holds): moving it would split the partition's run between members."""
    d = Driver(window=1000)
    d.join("a", prefetch=10)
    d.join("b", prefetch=10)
    d.g.enqueue([make_event(i, partition=i % 3) for i in range(3)])
    assert sorted(owners(d.g).values()) == ["a", "a", "b"]
    a_batch = d.take("a")  # a holds an event of each of its two partitions
    done, held = a_batch.events
    d.ack(a_batch, acked=uids([done]), through=a_batch.first_seq)
    d.g.enqueue([make_event(3, partition=done.key[1])])  # ready at a, which has room
    assert d.g.members["a"].flights and d.g.members["a"].room > 0
    d.ack(d.take("b"))  # b is idle: it does not take a's ready partition
    assert owners(d.g)[done.key] == "a" and owners(d.g)[held.key] == "a"
    check_group(d.g)


def test_offload_moves_movable_partitions_now_and_the_rest_as_they_free_up() -> None:
    d = Driver()
    d.join("a", prefetch=1)
    d.join("b", prefetch=1)
    d.g.enqueue([make_event(0, partition=0)])  # tie -> a
    d.g.enqueue([make_event(1, partition=1)])  # -> b
    d.g.enqueue([make_event(2, partition=2), make_event(3, partition=0)])  # P2 -> a
    busy = d.take("a")
    kept = busy.events[0].key
    waiting = P2 if kept == P0 else P0
    assert rebalance.offload(d.g, "a") == [waiting]
    assert d.g.members["a"].active and d.g.members["a"].offloaded
    assert owners(d.g)[waiting] == "b" and owners(d.g)[kept] == "a"
    d.ack(busy)  # the partition in flight was done: it leaves the slow member too
    assert owners(d.g)[kept] == ("b" if d.g.partitions[kept].pending else "a")
    assert d.g.offloads[0] == ("a", 1, "slow")
    assert d.g.members["a"].offloads >= 1 and d.g.members["b"].offloads == 0
    check_group(d.g)


def test_a_stalled_member_is_given_nothing_more_and_an_idle_one_takes_its_ready_work() -> None:
    """A member's window comes from its past pace: during a long job it kept taking the
    work behind the job while another member sat idle (session 34's newcomer: 16 short
    events waited out a 20 s job)."""
    d = Driver()
    d.join("a")
    d.join("b")
    d.g.enqueue([make_event(0, partition=0)])  # -> a (a tie: the lowest id)
    long_job = d.take("a")
    d.g.enqueue([make_event(1, partition=1), make_event(2, partition=2)])  # P1 -> b, P2 -> a
    assert (owners(d.g)[P1], owners(d.g)[P2]) == ("b", "a")
    d.now += 0.9
    assert health.stalled(d.g, d.now) == []  # pace unknown: a window's time (1 s) first
    d.now += 0.2
    assert health.stalled(d.g, d.now) == ["a"]
    assert d.g.take_batch("a", d.now) is None  # nothing more behind the long job
    assert not d.g.has_ready("a")  # (so no push task asks again and again)
    d.ack(d.take("b"))  # b done with its own work: it takes a's ready partition
    assert owners(d.g)[P2] == "b"
    assert ids(d.take("b").events) == ["e2"]
    d.ack(long_job)  # a progressed: it has room again
    assert d.g.members["a"].room > 0
    check_group(d.g)


def test_a_stall_is_judged_by_the_member_s_own_pace() -> None:
    d = Driver()
    d.join("a")
    d.join("b")
    for n in range(3):  # a quick pace: 10 ms an event
        d.g.enqueue([make_event(n, partition=0)])
        batch = d.take("a")
        d.now += 0.01
        d.ack(batch)
    d.g.enqueue([make_event(3, partition=0)])
    long_job = d.take("a")
    d.now += 0.2
    assert health.stalled(d.g, d.now) == []  # 20 paces, under the floor: acks may be late
    d.now += 0.1
    assert health.stalled(d.g, d.now) == ["a"]
    assert d.g.members["a"].room == 0
    d.ack(long_job)
    assert health.stalled(d.g, d.now) == [] and d.g.members["a"].room > 0  # it moved on
    check_group(d.g)


def test_offload_keeps_work_when_nobody_else_is_active() -> None:
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(0, partition=0), make_event(1, partition=1)])
    assert rebalance.offload(d.g, "a") == []
    assert owners(d.g) == {P0: "a", P1: "a"}
    assert d.g.members["a"].offloads == 0  # nothing moved: not counted
    check_group(d.g)


def test_an_offloaded_member_is_not_rebalanced_work_until_fast_again() -> None:
    d = Driver()
    d.join("a", prefetch=1)
    d.join("b", prefetch=1)
    d.g.enqueue([make_event(i, partition=i % 6) for i in range(12)])
    assert sorted(owners(d.g).values()) == ["a"] * 3 + ["b"] * 3
    busy = d.take("a")
    assert len(rebalance.offload(d.g, "a")) == 2  # its two waiting partitions go to b
    d.ack(busy)  # its last partition was in flight: now it goes too
    assert sorted(owners(d.g).values()) == ["b"] * 6
    assert rebalance.rebalance(d.g) == []  # nothing goes back to slow a
    d.g.members["a"].offloaded = False  # a fast push clears the mark (the facade does it)
    assert len(rebalance.rebalance(d.g)) == 3
    assert sorted(owners(d.g).values()) == ["a"] * 3 + ["b"] * 3
    check_group(d.g)


def test_owner_changes_say_when_they_only_give_new_partitions_their_first_owner() -> None:
    """The store may leave deferred acks for later when every change is a partition a
    publish just opened getting its first owner: none of its events was handed out."""
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(0, partition=0), make_event(1, partition=1)])
    assert d.g.take_owner_changes() == ({P0: "a", P1: "a"}, True)
    d.ack(d.take("a"))
    d.g.enqueue([make_event(2, partition=2)])
    d.join("b")  # takes idle partitions from a: moves of partitions a processed
    changes = d.g.take_owner_changes()
    assert P2 in changes.owners and changes.owners.keys() - {P2} and not changes.opened
    assert d.g.take_owner_changes() == ({}, True)
    check_group(d.g)


def test_a_partition_opened_again_before_its_drop_was_persisted_is_no_new_one() -> None:
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(0, partition=0)])
    d.g.take_owner_changes()
    d.ack(d.take("a"))
    d.g.sweep_idle(now=100.0, idle_s=30.0)
    assert d.g.sweep_idle(now=130.0, idle_s=30.0) == [P0]  # its row goes with the next take
    d.g.enqueue([make_event(1, partition=0)])  # ... but P0 is open again first
    assert d.g.take_owner_changes() == ({P0: "a"}, False)
    d.ack(d.take("a"))
    d.g.sweep_idle(now=140.0, idle_s=30.0)
    assert d.g.sweep_idle(now=170.0, idle_s=30.0) == [P0]
    assert d.g.take_owner_changes() == ({P0: None}, False)  # a drop is no first owner
    d.g.enqueue([make_event(2, partition=0)])  # opened after its drop was taken: new
    assert d.g.take_owner_changes() == ({P0: "a"}, True)


def test_a_partition_opened_with_no_member_gets_its_owner_as_no_new_one() -> None:
    d = Driver()
    d.g.enqueue([make_event(0, partition=0)])
    assert d.g.take_owner_changes() == ({}, True)
    d.join("a")  # the partition waited: conservatively not new any more
    assert d.g.take_owner_changes() == ({P0: "a"}, False)


# -- housekeeping -------------------------------------------------------------------------
def test_sweep_idle_drops_only_idle_partitions_after_idle_s() -> None:
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(0, partition=0), make_event(1, partition=1), make_event(2, 2)])
    batch = d.take("a")
    d.ack(batch, acked=["p/e0", "p/e2"], through=batch.first_seq - 1)  # e1 stays in flight
    assert d.g.sweep_idle(now=100.0, idle_s=30.0) == []  # starts P0's and P2's idle clocks
    assert d.g.sweep_idle(now=129.9, idle_s=30.0) == []
    d.g.enqueue([make_event(3, partition=2)])  # P2 busy again: its clock restarts
    assert sorted(d.g.sweep_idle(now=130.0, idle_s=30.0)) == [P0]
    assert set(d.g.partitions) == {P1, P2}
    assert P0 not in d.g.members["a"].partitions
    check_group(d.g)


class CountingDict(dict):
    """A group's partition table that counts lookups by key."""

    lookups = 0

    def get(self, key: object, default: object = None) -> object:
        CountingDict.lookups += 1
        return super().get(key, default)

    def __getitem__(self, key: object) -> object:
        CountingDict.lookups += 1
        return super().__getitem__(key)


def test_idle_partitions_are_dropped_in_the_order_their_clocks_started() -> None:
    d = Driver()
    d.join("a")
    d.g.enqueue([make_event(n, partition=n) for n in range(3)])
    d.ack(d.take("a"))
    assert d.g.sweep_idle(now=100.0, idle_s=30.0) == []  # P0, P1, P2 idle from 100
    d.g.enqueue([make_event(3, partition=1)])
    d.ack(d.take("a"))
    assert d.g.sweep_idle(now=110.0, idle_s=30.0) == []  # P1 busy and idle again: from 110
    assert sorted(d.g.sweep_idle(now=130.0, idle_s=30.0)) == [P0, P2]
    assert d.g.sweep_idle(now=139.9, idle_s=30.0) == []
    assert d.g.sweep_idle(now=140.0, idle_s=30.0) == [P1]
    assert d.g.partitions == {}
    check_group(d.g)


def test_a_sweep_reads_only_changed_partitions_and_those_due() -> None:
    d = Driver()
    d.join("a", prefetch=1000)
    d.g.enqueue([make_event(n, partition=n) for n in range(1000)])
    d.ack(d.take("a"))
    assert d.g.sweep_idle(now=100.0, idle_s=30.0) == []
    d.g.partitions = CountingDict(d.g.partitions)
    CountingDict.lookups = 0
    for now in (101.0, 110.0, 129.0):
        assert d.g.sweep_idle(now=now, idle_s=30.0) == []
    assert CountingDict.lookups <= 3, "each round read the first idle partition at most"
    assert len(d.g.sweep_idle(now=130.0, idle_s=30.0)) == 1000


def test_a_shortfall_means_a_batch_could_go_but_not_a_full_one() -> None:
    d = Driver()
    d.join("a", prefetch=4)
    assert d.g.shortfall("a") is None  # nothing ready
    d.g.enqueue([make_event(i) for i in range(2)])
    assert d.g.shortfall("a") == (2, 4)  # 2 ready, room for 4: worth lingering
    d.g.enqueue([make_event(i) for i in range(2, 4)])
    assert d.g.shortfall("a") is None  # a full batch is ready
    batch = d.take("a")
    d.g.enqueue([make_event(4)])
    assert d.g.shortfall("a") is None  # its only partition is in flight: not ready
    d.ack(batch)
    assert d.g.shortfall("a") == (1, 4)
    d.g.deactivate("a", "test")
    assert d.g.shortfall("a") is None
    assert d.g.shortfall("nobody") is None


def test_a_shortfall_reads_no_partition_when_more_are_ready_than_there_is_room() -> None:
    """A push service asks it on every publish: a member owning thousands of ready
    partitions (a key per customer) must not have them counted each time."""
    d = Driver()
    d.join("a", prefetch=100)
    d.g.enqueue([make_event(n, partition=n) for n in range(10_000)])
    d.g.partitions = CountingDict(d.g.partitions)
    CountingDict.lookups = 0
    assert d.g.shortfall("a") is None  # each ready partition holds an event at least
    assert CountingDict.lookups == 0
    fewer = Driver()
    fewer.join("a", prefetch=100)
    fewer.g.enqueue([make_event(n, partition=n) for n in range(99)])
    assert fewer.g.shortfall("a") == (99, 100)  # one partition short of a full push


def test_touched_names_members_that_may_have_work() -> None:
    d = Driver()
    d.join("a", prefetch=1)
    d.g.enqueue([make_event(0, partition=0), make_event(1, partition=1)])
    d.g.touched.clear()
    batch = d.take("a")
    assert d.g.touched == set()
    d.ack(batch)  # room again, and a partition still waits
    assert d.g.touched == {"a"}


def test_events_a_member_does_not_hold_are_reclaimed_and_kept_for_it() -> None:
    d = Driver()
    d.join("a")
    d.join("b")
    d.g.enqueue([make_event(0), make_event(1)])
    d.take("a")
    d.now = 10.0
    d.g.enqueue([make_event(2, partition=1)])
    late = d.take("b")
    assert d.g.reclaim("a", sent_before=5.0) == 2  # given at 0.0: lost on the way
    assert d.g.reclaim("b", sent_before=5.0) == 0  # given at 10.0: maybe still coming
    assert ids(late.events) == ["e2"]
    assert pending_ids(d.g, P0) == ["e0", "e1"] and owners(d.g)[P0] == "a"
    assert d.g.partitions[P0].held_back == {0, 1}  # a may have done them: they stay with a
    again = d.take("a")
    assert (ids(again.events), again.attempts) == (["e0", "e1"], [2, 2])
    check_group(d.g)
