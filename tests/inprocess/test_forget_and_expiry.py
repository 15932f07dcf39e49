"""Issue 14 in process: the housekeeping round forgets members inactive too long (in the
store too), ``forget`` removes one now and hands its work on, and ``stats`` reports the
rates. A real EventChannel over the memory store, driven with a fake clock."""

from __future__ import annotations

import pytest

from channel_server.core.records import ChannelKind
from channel_server.errors import InvalidArgument, MemberActive, NotSubscribed
from channel_server.store import MemoryStore
from tests.inprocess.conftest import ChannelFactory, FakeClock, event

PULL_TIMEOUT_S = 60.0
EXPIRY_S = 600.0


def members(channel, group: str = "default") -> list[str]:
    return [m["id"] for m in channel.stats()["groups"][group]["members"]]


def stored_members(store: MemoryStore) -> list[str]:
    return sorted(record.member_id for record in store.load("c").members)


def test_housekeeping_forgets_a_member_inactive_too_long_and_the_store_too(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    store = MemoryStore()
    channel = make_channel(
        clock=clock, store=store, pull_timeout_s=PULL_TIMEOUT_S, member_expiry_s=EXPIRY_S
    )
    channel.subscribe("p1")
    channel.subscribe("p2")
    # Given p1 stops calling get and is timed out, while p2 keeps calling
    clock.advance(PULL_TIMEOUT_S + 1)
    channel.get("p2")
    channel.housekeep()
    assert [m["active"] for m in channel.stats()["groups"]["default"]["members"]] == [False, True]
    # When it stays silent for the expiry
    clock.advance(EXPIRY_S - PULL_TIMEOUT_S - 2)
    channel.get("p2")
    channel.housekeep()
    assert members(channel) == ["p1", "p2"]  # 1 s to go
    clock.advance(1)
    channel.get("p2")
    channel.housekeep()
    # Then it is forgotten, here and in the store; coming back, it is a new member
    assert members(channel) == ["p2"]
    assert stored_members(store) == ["p2"]
    with pytest.raises(NotSubscribed):
        channel.get("p1")
    assert channel.subscribe("p1")["mode"] == "pull"
    assert members(channel) == ["p1", "p2"]


def test_forget_removes_an_inactive_member_and_refuses_an_active_one(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    store = MemoryStore()
    channel = make_channel(clock=clock, store=store, pull_timeout_s=PULL_TIMEOUT_S)
    channel.subscribe("p1")
    channel.subscribe("p2")
    clock.advance(PULL_TIMEOUT_S + 1)
    channel.get("p2")
    channel.housekeep()
    with pytest.raises(MemberActive):
        channel.forget("p2")
    gone = channel.forget("p1")
    assert gone == {
        "channel": "c",
        "group": "default",
        "member_id": "p1",
        "was_active": False,
        "inactive_reason": "no get for 60 s",
        "partitions": 0,
        "in_flight": 0,
        "group_dropped": False,
    }
    assert members(channel) == ["p2"] and stored_members(store) == ["p2"]
    with pytest.raises(NotSubscribed):
        channel.forget("p1")


def test_a_forced_forget_hands_the_member_s_events_to_the_others(
    make_channel: ChannelFactory,
) -> None:
    channel = make_channel()
    channel.subscribe("p1")
    channel.publish([event("e1"), event("e2", ts=2.0)])
    assert channel.get("p1")["event"]["id"] == "e1"  # p1 holds e1
    channel.subscribe("p2")
    gone = channel.forget("p1", None, True)
    assert (gone["was_active"], gone["partitions"], gone["in_flight"]) == (True, 1, 1)
    first = channel.get("p2")["event"]
    assert (first["id"], first["attempt"]) == ("e1", 2)  # delivered again, in order
    assert channel.get("p2", "pub/e1")["event"]["id"] == "e2"
    assert members(channel) == ["p2"]


def test_forgetting_the_last_member_of_a_topic_subscription_drops_its_backlog(
    make_channel: ChannelFactory,
) -> None:
    channel = make_channel(kind=ChannelKind.TOPIC)
    channel.subscribe("s1")
    channel.publish([event("e1")])
    channel.core.groups["s1"].deactivate("s1", "gone")
    assert channel.forget("s1")["group_dropped"] is True
    stats = channel.stats()
    assert (stats["groups"], stats["unacked"]) == ({}, 0)


@pytest.mark.parametrize(
    "args,argument",
    [
        (("bad id",), "subscriber_id"),
        (("p1", "bad group"), "group"),
        (("p1", None, "yes"), "force"),
        (("p1", None, 1), "force"),
    ],
)
def test_forget_checks_its_arguments(
    make_channel: ChannelFactory, args: tuple, argument: str
) -> None:
    channel = make_channel()
    channel.subscribe("p1")
    with pytest.raises(InvalidArgument) as info:
        channel.forget(*args)
    assert info.value.argument == argument
    assert members(channel) == ["p1"]


def test_forget_takes_three_arguments_at_most(make_channel: ChannelFactory) -> None:
    with pytest.raises(InvalidArgument, match="forget"):
        make_channel().forget("p1", None, True, "extra")


def test_stats_report_the_rates_sampled_by_housekeeping(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(clock=clock, rate_window_s=10.0)
    assert channel.stats()["rates"] is None  # nothing sampled yet
    channel.publish([event(f"e{i}", ts=float(i)) for i in range(10)])
    channel.housekeep()
    clock.advance(2.0)
    channel.publish([event(f"f{i}", ts=float(i)) for i in range(30)])
    channel.subscribe("p1")
    last = None
    for _ in range(5):
        last = channel.get("p1", last)["event"]
        last = f"{last['publisher_id']}/{last['id']}"
    channel.get("p1", last)  # acknowledges the fifth
    stats = channel.stats()
    assert (stats["accepted"], stats["acked"]) == (40, 5)
    assert stats["rates"] == {"interval_s": 2.0, "accepted_per_s": 15.0, "acked_per_s": 2.5}
