"""ChannelCore: publish preparation, dedupe, capacity, routing and multi-group retention."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore
from channel_server.core.group import AckOutcome, ConsumerGroup
from channel_server.core.member import Batch
from channel_server.core.records import ChannelKind
from channel_server.errors import InvalidEvent, LimitReached
from channel_server.events import Event, IdScope, event_uid, validate_batch
from channel_server.store import MemoryStore
from channel_server.store.base import ChannelSnapshot
from channel_server.wire import DEFAULT_GROUP
from tests.unit.group_checks import ids


def config(**overrides: object) -> ChannelConfig:
    return dataclasses.replace(ChannelConfig(), **overrides)


def raw(event_id: str, ts: float = 1.0, partition: int | str = 0, pub: str = "pub") -> dict:
    return {"id": event_id, "publisher_id": pub, "partition": partition, "timestamp": ts}


def uid(event_id: str, pub: str = "pub") -> str:
    return event_uid(pub, event_id)


def publish(core: ChannelCore, batch: list[dict], now: float = 0.0):
    outcome = core.prepare(batch)
    core.enqueue(outcome.accepted, now)
    return outcome


def join(group: ConsumerGroup, member_id: str, prefetch: int) -> None:
    group.join(member_id, "cb", prefetch, session=1, now=0.0)


def take(group: ConsumerGroup, member_id: str) -> Batch:
    batch = group.take_batch(member_id, 0.0)
    assert batch is not None
    return batch


def complete(
    core: ChannelCore,
    group: ConsumerGroup,
    batch: Batch,
    acked: set[str],
    nacked: dict[str, str],
) -> tuple[AckOutcome, list[Event]]:
    """The member's ack covering the whole batch (what it names neither way: skipped);
    ids of publisher ``pub``, named by uid as a subscriber does."""
    last = batch.first_seq + len(batch.events) - 1
    named = sorted(map(uid, acked))
    failed = {uid(i): error for i, error in nacked.items()}
    return core.acknowledge(group, batch.member_id, batch.session, named, failed, last, 0.0)


# -- publish ------------------------------------------------------------------------------
def test_a_member_counts_its_batches_and_ack_messages() -> None:
    """delivered / batches is how full the pushes were: what each costs is per batch."""
    core = ChannelCore("c", config())
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 2)
    publish(core, [raw("a", ts=1.0), raw("b", ts=2.0), raw("c", ts=3.0)])
    first = take(group, "s")
    complete(core, group, first, {"a", "b"}, {})
    complete(core, group, take(group, "s"), {"c"}, {})
    member = group.members["s"]
    assert (member.delivered, member.batches, member.ack_messages) == (3, 2, 2)
    complete(core, group, first, {"a"}, {})  # an ack of an old batch is still a message
    assert (member.batches, member.ack_messages) == (2, 3)


def test_queue_channel_has_the_default_group() -> None:
    core = ChannelCore("c", config())
    assert list(core.groups) == [DEFAULT_GROUP]
    assert core.add_group(DEFAULT_GROUP) is core.groups[DEFAULT_GROUP]


def test_prepare_assigns_offsets_and_enqueue_routes_in_order() -> None:
    core = ChannelCore("c", config())
    outcome = publish(core, [raw("a", ts=3.0), raw("b", ts=1.0), raw("c", ts=2.0)])
    assert [(ev.id, ev.offset) for ev in outcome.accepted] == [("a", 0), ("b", 1), ("c", 2)]
    assert core.next_offset == 3
    assert (core.unacked, core.accepted_total, core.acked_total) == (3, 3, 0)
    group = core.groups[DEFAULT_GROUP]
    assert group.backlog == 3
    join(group, "s", 10)
    assert ids(take(group, "s").events) == ["b", "c", "a"]
    assert outcome.summary() == {"accepted": 3, "duplicates": [], "refused": 0, "unrouted": 0}


def test_prepare_changes_nothing_but_the_offset_counter() -> None:
    core = ChannelCore("c", config())
    first = core.prepare([raw("a"), raw("b")])
    assert len(first.accepted) == 2
    assert len(core.delivered) == 0 and "a" not in core.delivered.known("pub")
    assert (core.unacked, core.groups[DEFAULT_GROUP].backlog) == (0, 0)
    second = core.prepare([raw("a")])  # not a duplicate: the first was never enqueued
    assert ids(second.accepted) == ["a"]
    assert second.accepted[0].offset == 2  # offsets are never reused


def test_invalid_batch_raises_and_keeps_nothing() -> None:
    core = ChannelCore("c", config())
    with pytest.raises(InvalidEvent) as info:
        core.prepare([raw("a"), {"id": "b", "publisher_id": "pub", "timestamp": "soon"}])
    assert (info.value.field, info.value.index) == ("timestamp", 1)
    assert core.next_offset == 0
    assert len(core.delivered) == 0 and "a" not in core.delivered.known("pub")


def test_max_publish_batch_and_payload_limit_come_from_config() -> None:
    core = ChannelCore("c", config(max_publish_batch=2, max_payload_bytes=4))
    with pytest.raises(InvalidEvent) as info:
        core.prepare([raw("a"), raw("b"), raw("c")])
    assert info.value.field == "batch"
    with pytest.raises(InvalidEvent) as info:
        core.prepare([dict(raw("a"), payload="12345")])
    assert info.value.field == "payload"


def test_duplicates_against_delivered_set_and_within_batch() -> None:
    core = ChannelCore("c", config())
    publish(core, [raw("a"), raw("b")])
    outcome = publish(core, [raw("a"), raw("c"), raw("c"), raw("d"), raw("b")])
    assert outcome.duplicates == ["a", "c", "b"]
    assert ids(outcome.accepted) == ["c", "d"]
    assert outcome.accepted[0].offset == 3  # the first "c" of the batch is kept
    assert (core.unacked, core.accepted_total) == (4, 4)
    assert core.groups[DEFAULT_GROUP].backlog == 4
    again = publish(core, [raw("d")])
    assert again.duplicates == ["d"]
    assert again.accepted == []


ID_DRAWS = st.lists(st.tuples(st.sampled_from(["p", "q"]), st.sampled_from("abcdef")), max_size=8)


@settings(max_examples=300, deadline=None)
@given(ID_DRAWS, ID_DRAWS, st.sampled_from(list(IdScope)))
def test_duplicates_are_what_the_window_or_the_batch_had_in_the_event_realm(
    earlier: list[tuple[str, str]], batch: list[tuple[str, str]], scope: IdScope
) -> None:
    """Runs of publishers, ids repeated within a run, across runs and from the window:
    each event's fate is the one-by-one rule's (its realm's window, then the batch)."""
    core = ChannelCore("c", config(), id_scope=scope)
    publish(core, [raw(i, pub=p) for p, i in earlier])
    realm = (lambda p: p) if scope is IdScope.PUBLISHER else (lambda p: "")
    known = {(realm(p), i) for p, i in earlier}
    expected_dupes, expected_fresh = [], []
    for p, i in batch:
        if (realm(p), i) in known:
            expected_dupes.append(i)
        else:
            known.add((realm(p), i))
            expected_fresh.append((p, i))
    outcome = core.prepare([raw(i, pub=p) for p, i in batch])
    assert outcome.duplicates == expected_dupes
    assert [(ev.publisher_id, ev.id) for ev in outcome.accepted] == expected_fresh


def test_acknowledged_id_is_still_a_duplicate() -> None:
    core = ChannelCore("c", config())
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    publish(core, [raw("a")])
    batch = take(group, "s")
    _, retired = complete(core, group, batch, {"a"}, {})
    assert ids(retired) == ["a"]
    assert core.prepare([raw("a")]).duplicates == ["a"]


def test_capacity_accepts_the_front_and_lists_refused_ids() -> None:
    core = ChannelCore("c", config(capacity=4))
    publish(core, [raw("a")])
    outcome = publish(core, [raw("a"), raw("b"), raw("c"), raw("d"), raw("e"), raw("f")])
    assert outcome.duplicates == ["a"]
    assert ids(outcome.accepted) == ["b", "c", "d"]
    assert outcome.refused == ["e", "f"]
    assert outcome.summary()["refused"] == 2
    assert core.unacked == 4
    assert uid("e") not in core.delivered  # refused ids may be published again later
    full = core.prepare([raw("e")])
    assert (full.accepted, full.refused) == ([], ["e"])


def test_capacity_frees_up_as_events_retire() -> None:
    core = ChannelCore("c", config(capacity=2))
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 1)
    publish(core, [raw("a"), raw("b")])
    assert core.prepare([raw("c")]).refused == ["c"]
    complete(core, group, take(group, "s"), {"a"}, {})
    assert ids(publish(core, [raw("c")]).accepted) == ["c"]


def test_topic_without_group_reports_unrouted_and_stores_nothing() -> None:
    core = ChannelCore("t", config(), kind=ChannelKind.TOPIC)
    assert core.groups == {}
    outcome = core.prepare([raw("a"), raw("b"), raw("a")])
    assert outcome.unrouted == 2
    assert outcome.duplicates == ["a"]
    assert (outcome.accepted, outcome.refused) == ([], [])
    assert outcome.summary()["unrouted"] == 2
    core.enqueue(outcome.accepted, 0.0)
    assert core.unacked == 0
    assert len(core.delivered) == 0 and "a" not in core.delivered.known("pub")


def test_topic_keeps_events_only_for_groups_that_exist_at_publish() -> None:
    core = ChannelCore("t", config(), kind=ChannelKind.TOPIC)
    early = core.add_group("early")
    publish(core, [raw("a")])
    late = core.add_group("late")
    publish(core, [raw("b")])
    assert (early.backlog, late.backlog) == (2, 1)
    join(late, "s", 10)
    assert ids(take(late, "s").events) == ["b"]


# -- retention ----------------------------------------------------------------------------
def test_event_retires_only_when_every_group_at_publish_has_acked() -> None:
    core = ChannelCore("c", config())
    default, audit = core.groups[DEFAULT_GROUP], core.add_group("audit")
    join(default, "d", 10)
    join(audit, "x", 10)
    publish(core, [raw("a", ts=1.0), raw("b", ts=2.0)])
    late = core.add_group("late")  # created after the publish: holds nothing of it
    join(late, "l", 10)
    assert late.take_batch("l", 0.0) is None
    _, retired = complete(core, default, take(default, "d"), {"a", "b"}, {})
    assert retired == []
    assert (core.unacked, core.acked_total) == (2, 0)
    _, retired = complete(core, audit, take(audit, "x"), {"b"}, {})
    assert ids(retired) == ["b"]
    assert (core.unacked, core.acked_total) == (1, 1)
    _, retired = complete(core, audit, take(audit, "x"), {"a"}, {})
    assert ids(retired) == ["a"]
    assert (core.unacked, core.accepted_total, core.acked_total) == (0, 2, 2)


def test_redelivery_in_one_group_does_not_retire_early() -> None:
    core = ChannelCore("c", config())
    default, audit = core.groups[DEFAULT_GROUP], core.add_group("audit")
    join(default, "d", 10)
    join(audit, "x", 10)
    publish(core, [raw("a")])
    complete(core, default, take(default, "d"), set(), {})  # missing: redelivered
    _, retired = complete(core, audit, take(audit, "x"), {"a"}, {})
    assert retired == []
    _, retired = complete(core, default, take(default, "d"), {"a"}, {})
    assert ids(retired) == ["a"]
    assert core.unacked == 0


def test_dead_letter_resolves_the_event_for_its_group() -> None:
    core = ChannelCore("c", config(max_attempts=2))
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    publish(core, [raw("poison"), raw("fine", ts=2.0, partition=1)])
    outcome, retired = complete(core, group, take(group, "s"), {"fine"}, {"poison": "bad"})
    assert ids(retired) == ["fine"]
    assert ids(outcome.retried) == ["poison"]
    outcome, retired = complete(core, group, take(group, "s"), set(), {"poison": "still bad"})
    assert ids(retired) == ["poison"]
    assert [(d.event.id, d.group, d.error) for d in core.dead_letters] == [
        ("poison", DEFAULT_GROUP, "still bad")
    ]
    assert (core.unacked, core.acked_total) == (0, 2)


def test_delivered_window_uses_the_given_clock() -> None:
    core = ChannelCore("c", config(dedupe_max_age_s=10.0))
    publish(core, [raw("a")], now=0.0)
    publish(core, [raw("b")], now=5.0)
    assert core.prepare([raw("a"), raw("b")]).duplicates == ["a", "b"]
    core.delivered.expire(now=16.0)
    assert uid("a") not in core.delivered  # 16 s old: out of the 10 s window
    assert ids(core.prepare([raw("a")]).accepted) == ["a"]


def test_retry_right_after_a_quiet_spell_is_a_duplicate() -> None:
    # One publish, then another after more than the window: the second id was accepted
    # a moment ago, so republishing it (a retry after a lost reply) is a duplicate.
    core = ChannelCore("c", config(dedupe_max_age_s=10.0))
    publish(core, [raw("a")], now=0.0)
    publish(core, [raw("b")], now=20.0)
    assert core.prepare([raw("b")]).duplicates == ["b"]


# -- bytes queued (issue 13) --------------------------------------------------------------
def sized(event_id: str, payload_bytes: int, ts: float = 1.0) -> dict:
    return raw(event_id, ts) | {"payload": "x" * payload_bytes}


def test_bytes_limit_accepts_the_front_that_fits_and_says_so() -> None:
    core = ChannelCore("c", config(max_payload_bytes=200, max_queued_bytes=500))
    publish(core, [sized("a", 199)])  # 200 bytes with its id
    outcome = publish(core, [sized(i, 99) for i in "bcde"])
    assert ids(outcome.accepted) == ["b", "c", "d"]  # 500 bytes: exactly full
    assert (outcome.refused, outcome.full_by) == (["e"], "bytes")
    assert (core.unacked, core.queued_bytes) == (4, 500)
    assert "e" not in core.delivered  # a refused id may be published again
    assert core.prepare([raw("f")]).refused == ["f"]  # no byte left, even for a small one


def test_count_limit_is_named_when_it_refuses_first() -> None:
    core = ChannelCore("c", config(capacity=2, max_payload_bytes=100, max_queued_bytes=10_000))
    outcome = publish(core, [sized("a", 10), sized("b", 10), sized("c", 10)])
    assert (outcome.refused, outcome.full_by) == (["c"], "events")


def test_partition_sub_queues_over_every_group_are_bounded() -> None:
    """Each group keeps its own sub-queue per partition: one account's 500 groups times
    2,000 partition keys took a broker from 41 to 609 MB, with nothing to refuse it."""
    core = ChannelCore("c", config(max_partition_queues=7))
    core.add_group("audit")  # a new partition opens a sub-queue in both groups
    outcome = publish(core, [raw(f"e{n}", partition=n % 5) for n in range(8)])
    assert ids(outcome.accepted) == ["e0", "e1", "e2"]  # partitions 0-2: 6 sub-queues
    assert (outcome.refused, outcome.full_by) == (["e3", "e4", "e5", "e6", "e7"], "partitions")
    assert core.partition_queues() == 6
    more = publish(core, [raw("f0", partition=0), raw("f1", partition=1), raw("f9", partition=9)])
    assert ids(more.accepted) == ["f0", "f1"]  # open partitions take events at the cap
    assert (more.refused, more.full_by) == (["f9"], "partitions")


def test_at_the_partition_cap_idle_partitions_make_room() -> None:
    core = ChannelCore("c", config(max_partition_queues=3))
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    publish(core, [raw(f"e{n}", partition=n) for n in range(3)])
    complete(core, group, take(group, "s"), {"e0", "e1"}, {})  # partitions 0 and 1 idle
    outcome = publish(core, [raw(f"f{n}", partition=10 + n) for n in range(3)])
    assert ids(outcome.accepted) == ["f0", "f1"]  # partition 2 still holds e2
    assert (outcome.refused, outcome.full_by) == (["f2"], "partitions")
    assert set(group.partitions) == {("pub", 2), ("pub", 10), ("pub", 11)}
    assert group.take_owner_changes().owners[("pub", 0)] is None  # the store forgets it too


def test_below_the_partition_cap_idle_partitions_stay() -> None:
    core = ChannelCore("c", config(max_partition_queues=100))
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    publish(core, [raw("e0", partition=0)])
    complete(core, group, take(group, "s"), {"e0"}, {})
    publish(core, [raw("e1", partition=1)])
    assert set(group.partitions) == {("pub", 0), ("pub", 1)}  # kept for partition_idle_s


def test_bytes_are_released_by_acks_dead_letters_and_dropped_groups() -> None:
    core = ChannelCore("c", config(max_attempts=1))
    default = core.groups[DEFAULT_GROUP]
    join(default, "d", 10)
    publish(core, [sized("a", 10), sized("b", 20, ts=2.0)])
    assert core.queued_bytes == 11 + 21
    complete(core, default, take(default, "d"), {"a"}, {"b": "boom"})  # b: dead
    assert (core.unacked, core.queued_bytes, len(core.dead_letters)) == (0, 0, 1)
    core.add_group("audit")
    publish(core, [sized("c", 30, ts=3.0)])
    complete(core, default, take(default, "d"), {"c"}, {})
    assert core.queued_bytes == 31  # audit still holds c
    core.drop_group("audit")
    assert (core.unacked, core.queued_bytes) == (0, 0)


def test_bytes_are_counted_again_from_a_restored_snapshot() -> None:
    store = MemoryStore()
    core = ChannelCore("c", config())
    store.save_group("c", DEFAULT_GROUP, 0)
    store.save_group("c", "audit", 0)
    core.add_group("audit")
    outcome = publish(core, [sized("a", 10), sized("b", 20, ts=2.0)])
    store.append("c", outcome.accepted, core.next_offset, 0.0)
    store.ack("c", "audit", [outcome.accepted[0].offset])
    restored = ChannelCore("c", config(), first_session=100)
    restored.restore(store.load("c"), 0.0)
    assert (restored.unacked, restored.queued_bytes) == (2, core.queued_bytes) == (2, 11 + 21)


# -- members (issue 13) -------------------------------------------------------------------
def test_member_cap_forgets_the_member_inactive_longest() -> None:
    core = ChannelCore("c", config(max_members=3))
    group = core.groups[DEFAULT_GROUP]
    for member_id, now in (("a", 1.0), ("b", 2.0), ("c", 3.0)):
        group.join(member_id, "cb", 1, session=1, now=now)
    with pytest.raises(LimitReached) as info:
        core.make_room_for_member()
    assert (info.value.resource, info.value.limit) == ("members", 3)
    group.deactivate("c", "gone")
    group.deactivate("b", "gone")
    assert core.make_room_for_member() == [(DEFAULT_GROUP, "b")]  # b was seen last earlier
    assert sorted(group.members) == ["a", "c"]
    assert core.make_room_for_member() == []  # room already


def test_member_cap_never_forgets_the_last_member_of_a_subscription() -> None:
    """A quiet subscriber's own group holds its backlog: a stranger's new members must
    not make room by dropping it (only its second member may go)."""
    core = ChannelCore("c", config(max_members=3))
    for group_name, member_id, now in (("alice", "a", 1.0), ("alice", "a2", 2.0), ("b", "b", 3.0)):
        group = core.groups.get(group_name) or core.add_group(group_name)
        group.join(member_id, "cb", 1, session=1, now=now)
        group.deactivate(member_id, "quiet")
    assert core.make_room_for_member() == [("alice", "a")]  # alice's group keeps a2
    core.add_group("c").join("c", "cb", 1, session=2, now=4.0)  # at the cap again
    with pytest.raises(LimitReached):  # a2 and b are their subscriptions' last members
        core.make_room_for_member()
    assert sorted(core.groups["alice"].members) == ["a2"]


# -- events that cannot be pushed (issue 13) ----------------------------------------------
def test_unpushable_events_are_dead_and_the_rest_goes_back_unblamed() -> None:
    core = ChannelCore("c", config())
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    publish(core, [raw("a"), raw("bad", ts=2.0), raw("c", ts=3.0, partition=1)])
    batch = take(group, "s")
    outcome, retired = core.bury_unpushable(
        group, "s", batch.session, batch.seqs, {uid("bad"): "cannot be sent"}
    )
    assert [(ev.id, why) for ev, why in outcome.dead] == [("bad", "cannot be sent")]
    assert ids(retired) == ["bad"]
    assert [(d.event.id, d.error) for d in core.dead_letters] == [("bad", "cannot be sent")]
    member = group.members["s"]
    assert (member.active, member.failures, member.in_flight) == (True, 0, 0)
    again = take(group, "s")
    assert ids(again.events) == ["a", "c"]
    assert again.attempts == [1, 1]  # the push was never sent: not an attempt
    assert (core.unacked, core.queued_bytes) == (2, sum(ev.size for ev in again.events))


# -- id scopes (issue 13) -----------------------------------------------------------------
def test_two_publishers_may_use_one_id_each_event_delivered_and_acked_alone() -> None:
    core = ChannelCore("c", config())
    assert core.id_scope is IdScope.PUBLISHER  # the default
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    first = publish(core, [raw("x", ts=1.0, pub="A")])
    second = publish(core, [raw("x", ts=2.0, pub="B")])
    assert (ids(first.accepted), ids(second.accepted), second.duplicates) == (["x"], ["x"], [])
    batch = take(group, "s")  # both in flight to one member at once
    assert [ev.uid for ev in batch.events] == ["A/x", "B/x"]
    assert list(group.members["s"].flights) == ["A/x", "B/x"]
    _, retired = core.acknowledge(group, "s", batch.session, ["B/x"], {}, 0, 1.0)
    assert [ev.uid for ev in retired] == ["B/x"]
    assert list(group.members["s"].flights) == ["A/x"]  # A's x is still held
    assert (core.unacked, core.acked_total) == (1, 1)
    _, retired = core.acknowledge(group, "s", batch.session, ["A/x"], {}, 0, 2.0)
    assert [ev.uid for ev in retired] == ["A/x"]
    assert (core.unacked, core.acked_total) == (0, 2)
    again = core.prepare([raw("x", pub="A"), raw("x", pub="B"), raw("x", pub="C")])
    assert (again.duplicates, [ev.uid for ev in again.accepted]) == (["x", "x"], ["C/x"])


def test_duplicates_within_one_batch_follow_the_scope() -> None:
    batch = [raw("x", pub="A"), raw("x", pub="B"), raw("x", pub="A")]
    per_publisher = ChannelCore("c", config()).prepare(batch)
    assert [ev.uid for ev in per_publisher.accepted] == ["A/x", "B/x"]
    assert per_publisher.duplicates == ["x"]
    channel_wide = ChannelCore("c", config(), id_scope=IdScope.CHANNEL).prepare(batch)
    assert [ev.uid for ev in channel_wide.accepted] == ["A/x"]
    assert channel_wide.duplicates == ["x", "x"]


def test_a_channel_wide_scope_refuses_another_publishers_id() -> None:
    core = ChannelCore("c", config(), id_scope=IdScope.CHANNEL)
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    publish(core, [raw("x", pub="A")])
    outcome = publish(core, [raw("x", pub="B"), raw("y", ts=2.0, pub="B")])
    assert outcome.duplicates == ["x"]
    assert [ev.uid for ev in outcome.accepted] == ["B/y"]
    assert ("x" in core.delivered, "x" in core.delivered.known("A")) == (True, False)
    batch = take(group, "s")  # flights and acks still name events by uid
    assert list(group.members["s"].flights) == ["A/x", "B/y"]
    _, retired = core.acknowledge(group, "s", batch.session, ["A/x", "B/y"], {}, 0, 1.0)
    assert [ev.uid for ev in retired] == ["A/x", "B/y"]


@pytest.mark.parametrize(
    ("scope", "duplicates", "accepted"),
    [
        (IdScope.PUBLISHER, ["x", "y"], ["B/x", "A/y", "B/z"]),
        (IdScope.CHANNEL, ["x", "x", "y", "y", "z"], []),
    ],
)
def test_the_restored_window_holds_what_the_scope_checks(
    scope: IdScope, duplicates: list[str], accepted: list[str]
) -> None:
    # Given a stored window of (publisher id, id, accepted at); "" is the publisher id of
    # an id kept by a store from before id scopes (a channel-wide channel's)
    stored = [("A", "x", 1.0), ("B", "y", 2.0), ("", "z", 3.0)]
    core = ChannelCore("c", config(dedupe_max_age_s=100.0), id_scope=scope)
    core.restore(ChannelSnapshot(next_offset=3, delivered=stored), now=4.0)
    # When A's and B's ids are published again
    batch = [raw("x", pub="A"), raw("x", pub="B"), raw("y", pub="A"), raw("y", pub="B")]
    outcome = core.prepare([*batch, raw("z", pub="B")])
    # Then the window restored as this scope's keys says which are duplicates
    assert outcome.duplicates == duplicates
    assert [ev.uid for ev in outcome.accepted] == accepted
    assert len(core.delivered) == 3


def test_a_restored_window_expires_by_the_stored_times() -> None:
    core = ChannelCore("c", config(dedupe_max_age_s=10.0))
    core.restore(ChannelSnapshot(delivered=[("A", "x", 0.0), ("A", "y", 8.0)]), now=8.0)
    core.delivered.expire(now=12.0)
    assert ("x" in core.delivered.known("A"), "y" in core.delivered.known("A")) == (False, True)


def test_replay_names_a_dead_letter_by_uid_or_every_one_by_id() -> None:
    core = ChannelCore("c", config(max_attempts=1))
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    publish(core, [raw("x", pub="A"), raw("x", ts=2.0, pub="B"), raw("x", ts=3.0, pub="C")])
    batch = take(group, "s")
    failed = {f"{pub}/x": "bad" for pub in "ABC"}
    core.acknowledge(group, "s", batch.session, [], failed, batch.first_seq + 2, 1.0)
    assert [d.event.uid for d in core.dead_letters] == ["A/x", "B/x", "C/x"]
    chosen, _ = core.replay({"B/x"})
    assert [d.event.uid for d in chosen] == ["B/x"]
    chosen, _ = core.replay({"x"})
    assert [d.event.uid for d in chosen] == ["A/x", "C/x"]
    assert core.dead_letters == []


# -- counters and latency (metrics) -------------------------------------------------------
def test_nacks_redeliveries_dead_letters_and_ack_latency_are_counted() -> None:
    # Given two events accepted at t=100 and a member with room for both
    core = ChannelCore("c", config(max_attempts=2))
    outcome = core.prepare_valid(validate_batch([raw("a"), raw("b")]), accepted_at=100.0)
    core.enqueue(outcome.accepted, 100.0)
    group = core.groups[DEFAULT_GROUP]
    join(group, "s1", prefetch=10)
    # When a is acked 0.5 s later and b fails once, then is delivered again and fails again
    batch = take(group, "s1")
    core.acknowledge(group, "s1", 1, [uid("a")], {uid("b"): "boom"}, batch.first_seq + 1, 100.5)
    again = take(group, "s1")
    assert [ev.id for ev in again.events] == ["b"] and again.attempts == [2]
    complete(core, group, again, set(), {"b": "boom again"})
    # Then two nacks, one redelivery and one dead letter are counted, and one ack timed
    assert (group.nacked, group.redelivered, group.dead_lettered) == (2, 1, 1)
    latency = group.ack_latency.to_dict()
    assert latency["count"] == 1 and latency["sum"] == 0.5
    assert ["+Inf", 1] in latency["buckets"] and [0.25, 0] in latency["buckets"]


def test_events_without_an_acceptance_time_are_not_timed() -> None:
    core = ChannelCore("c", config())
    group = core.groups[DEFAULT_GROUP]
    join(group, "s1", prefetch=10)
    publish(core, [raw("a")])  # prepare() leaves accepted_at at 0, like a restored event
    complete(core, group, take(group, "s1"), {"a"}, {})
    assert group.ack_latency.count == 0 and group.nacked == 0


def test_dead_letters_past_their_caps_drop_the_oldest() -> None:
    """Out of capacity and max_queued_bytes once dead, letters had no cap: a handler that
    always failed made the broker hold every event published (session 33's attacker)."""
    core = ChannelCore("c", config(max_attempts=1, max_dead_letters=3))
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    publish(core, [raw(f"e{n}", ts=float(n)) for n in range(5)])
    batch = take(group, "s")
    complete(core, group, batch, set(), {f"e{n}": "bad" for n in range(5)})
    assert [d.event.id for d in core.dead_letters] == ["e2", "e3", "e4"]
    assert [d.event.id for d in core.letters_dropped] == ["e0", "e1"]
    size = core.dead_letters[0].event.size
    by_bytes = ChannelCore("c", config(max_attempts=1, max_dead_letter_bytes=2 * size))
    group = by_bytes.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    publish(by_bytes, [raw(f"e{n}", ts=float(n)) for n in range(5)])
    complete(by_bytes, group, take(group, "s"), set(), {f"e{n}": "bad" for n in range(5)})
    assert [d.event.id for d in by_bytes.dead_letters] == ["e3", "e4"]
