"""Issue 14: members that are gone do not stay listed. The core forgets a member inactive
with no sign of life for ``member_expiry_s`` (never the last member of a subscription
group) and removes one an operator names (an active one only when forced), with a fake
clock: times are passed in."""

from __future__ import annotations

import dataclasses

import pytest

from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore
from channel_server.core.group import ConsumerGroup
from channel_server.core.records import ChannelKind
from channel_server.errors import MemberActive, NotSubscribed
from channel_server.wire import DEFAULT_GROUP
from tests.unit.group_checks import check_group, ids, owners

EXPIRY_S = 600.0


def core_with(*members: tuple[str, float], **overrides: object) -> ChannelCore:
    """A queue channel whose default group has these (member, joined at) members."""
    config = dataclasses.replace(ChannelConfig(), **({"member_expiry_s": EXPIRY_S} | overrides))
    core = ChannelCore("c", config)
    for member_id, now in members:
        core.groups[DEFAULT_GROUP].join(member_id, "cb", 10, session=1, now=now)
    return core


def publish(core: ChannelCore, count: int, partitions: int) -> None:
    batch = [
        {"id": f"e{i}", "publisher_id": "pub", "partition": i % partitions, "timestamp": i}
        for i in range(count)
    ]
    core.enqueue(core.prepare(batch).accepted, 0.0)


def listed(group: ConsumerGroup) -> list[str]:
    return sorted(group.members)


# -- expiry -------------------------------------------------------------------------------
def test_an_inactive_member_is_forgotten_after_the_expiry_without_a_sign_of_life() -> None:
    core = core_with(("a", 0.0), ("b", 0.0))
    group = core.groups[DEFAULT_GROUP]
    group.heartbeat("a", 100.0)
    group.deactivate("a", "no answer")  # last seen at 100
    assert core.expire_members(100.0 + EXPIRY_S - 1) == []
    assert listed(group) == ["a", "b"]
    assert core.expire_members(100.0 + EXPIRY_S) == [(DEFAULT_GROUP, "a")]
    assert listed(group) == ["b"]
    check_group(group)


def test_active_members_never_expire_however_quiet() -> None:
    core = core_with(("a", 0.0))
    assert core.expire_members(10 * EXPIRY_S) == []
    assert listed(core.groups[DEFAULT_GROUP]) == ["a"]


def test_a_sign_of_life_while_inactive_postpones_the_expiry() -> None:
    # A frozen subscriber that wakes up heartbeats (and then subscribes again)
    core = core_with(("a", 0.0))
    group = core.groups[DEFAULT_GROUP]
    group.deactivate("a", "no answer")
    group.heartbeat("a", EXPIRY_S - 1)
    assert core.expire_members(EXPIRY_S + 1) == []
    assert core.expire_members(2 * EXPIRY_S - 1) == [(DEFAULT_GROUP, "a")]


def test_an_expiry_of_zero_keeps_inactive_members_for_ever() -> None:
    core = core_with(("a", 0.0), member_expiry_s=0.0)
    core.groups[DEFAULT_GROUP].deactivate("a", "gone")
    assert core.expire_members(1e9) == []
    assert listed(core.groups[DEFAULT_GROUP]) == ["a"]


def test_the_longest_silent_go_first_and_all_that_are_due_go() -> None:
    core = core_with(("a", 30.0), ("b", 10.0), ("c", 20.0), ("d", 0.0))
    group = core.groups[DEFAULT_GROUP]
    for member_id in ("a", "b", "c"):
        group.deactivate(member_id, "gone")
    assert core.expire_members(EXPIRY_S + 25.0) == [(DEFAULT_GROUP, "b"), (DEFAULT_GROUP, "c")]
    assert listed(group) == ["a", "d"]


def test_the_last_member_of_a_subscription_group_is_kept() -> None:
    # On a topic each subscriber is a group of its own, holding the events published for
    # it: expiry must not drop them; forget (or unsubscribe) does, when asked.
    config = dataclasses.replace(ChannelConfig(), member_expiry_s=EXPIRY_S)
    topic = ChannelCore("t", config, ChannelKind.TOPIC)
    topic.add_group("s1").join("s1", "cb", 10, session=1, now=0.0)
    topic.groups["s1"].deactivate("s1", "gone")
    assert topic.expire_members(10 * EXPIRY_S) == []
    # and on a queue, a group of two loses one, not the last
    core = core_with()
    for member_id in ("x", "y"):
        core.add_group("audit").join(member_id, "cb", 10, session=1, now=0.0)
        core.groups["audit"].deactivate(member_id, "gone")
    assert core.expire_members(EXPIRY_S) == [("audit", "x")]
    assert core.expire_members(10 * EXPIRY_S) == []
    assert listed(core.groups["audit"]) == ["y"]


# -- forget -------------------------------------------------------------------------------
def test_forgetting_an_inactive_member_removes_it_at_once() -> None:
    core = core_with(("a", 0.0), ("b", 0.0))
    group = core.groups[DEFAULT_GROUP]
    group.deactivate("a", "no get for 60 s")
    gone = core.forget_member(DEFAULT_GROUP, "a")
    assert (gone.member_id, gone.was_active, gone.inactive_reason) == (
        "a",
        False,
        "no get for 60 s",
    )
    assert (gone.partitions, gone.in_flight) == (0, 0)
    assert listed(group) == ["b"]
    check_group(group)


def test_forgetting_an_active_member_is_refused_unless_forced() -> None:
    core = core_with(("a", 0.0), ("b", 0.0))
    with pytest.raises(MemberActive) as info:
        core.forget_member(DEFAULT_GROUP, "a")
    assert (info.value.subscriber_id, info.value.group, info.value.channel) == ("a", "default", "c")
    assert listed(core.groups[DEFAULT_GROUP]) == ["a", "b"]


def test_a_forced_forget_gives_what_the_member_held_back_in_order() -> None:
    # Given a holds the first event of its partitions (prefetch 10, window 10)
    core = core_with(("a", 0.0))
    group = core.groups[DEFAULT_GROUP]
    publish(core, 4, partitions=2)
    batch = group.take_batch("a", 0.0)
    assert batch is not None and len(batch.events) == 4
    group.join("b", "cb", 10, session=2, now=0.0)
    # When an operator forces it out
    gone = core.forget_member(DEFAULT_GROUP, "a", force=True)
    # Then its partitions and the events it held go to b, in their order
    assert (gone.was_active, gone.partitions, gone.in_flight) == (True, 2, 4)
    assert listed(group) == ["b"]
    assert set(owners(group).values()) == {"b"}
    check_group(group)
    again = group.take_batch("b", 0.0)
    assert again is not None
    assert sorted(ids(again.events)) == ["e0", "e1", "e2", "e3"]
    assert [ev.id for ev in again.events if ev.partition == 0] == ["e0", "e2"]


def test_forgetting_an_unknown_member_or_group_is_not_subscribed() -> None:
    core = core_with(("a", 0.0))
    with pytest.raises(NotSubscribed):
        core.forget_member(DEFAULT_GROUP, "nobody")
    with pytest.raises(NotSubscribed):
        core.forget_member("no-such-group", "a")
