"""Pull members cannot wedge partitions: timeouts, unsubscribe with a message in hand,
readmission by the next get, and housekeeping of pull groups (fake clock, no sockets)."""

from __future__ import annotations

import pytest

from channel_server.core.records import ChannelKind
from channel_server.errors import SubscriberIdInUse
from channel_server.events import event_uid
from tests.inprocess.conftest import ChannelFactory, FakeClock, event

PULL_TIMEOUT_S = 60.0


def got(reply: dict) -> tuple[str, int] | None:
    if reply["status"] == "empty":
        return None
    return reply["event"]["id"], reply["event"]["attempt"]


def uid(event: dict) -> str:
    """What a get names as received last."""
    return event_uid(event["publisher_id"], event["id"])


def member(channel, member_id: str, group: str = "default") -> dict:
    members = channel.stats()["groups"][group]["members"]
    return next(m for m in members if m["id"] == member_id)


def test_a_quiet_pull_member_times_out_and_its_message_moves_on(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(clock=clock, pull_timeout_s=PULL_TIMEOUT_S)
    channel.subscribe("p1")
    channel.publish([event("e1"), event("e2", ts=2.0)])
    assert got(channel.get("p1")) == ("e1", 1)
    channel.subscribe("p2")  # joins while p1 holds the partition: nothing moves
    assert got(channel.get("p2")) is None
    clock.advance(PULL_TIMEOUT_S - 1)
    channel.get("p2")  # p2 is alive
    clock.advance(2)
    channel.housekeep()
    state = member(channel, "p1")
    assert state["active"] is False
    assert state["inactive_reason"] == "no get for 60 s"
    assert member(channel, "p2")["active"] is True
    assert got(channel.get("p2")) == ("e1", 2)  # the held message, at the head, redelivered
    assert got(channel.get("p2", "pub/e1")) == ("e2", 1)


def test_the_next_get_readmits_a_timed_out_member(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(kind=ChannelKind.TOPIC, clock=clock, pull_timeout_s=PULL_TIMEOUT_S)
    channel.subscribe("s1")
    channel.publish([event("m1"), event("m2", ts=2.0)])
    assert got(channel.get("s1")) == ("m1", 1)
    clock.advance(PULL_TIMEOUT_S + 1)
    channel.housekeep()
    assert member(channel, "s1", "s1")["active"] is False
    # The client got m1 before it went quiet: naming it acknowledges it, exactly once.
    assert got(channel.get("s1", "pub/m1")) == ("m2", 1)
    assert member(channel, "s1", "s1")["active"] is True
    assert got(channel.get("s1", "pub/m2")) is None
    assert channel.stats()["unacked"] == 0


def test_unsubscribe_with_a_message_in_hand_puts_it_back_at_the_head(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(clock=clock)
    channel.subscribe("p1")
    channel.publish([event("e1"), event("e2", ts=2.0)])
    assert got(channel.get("p1")) == ("e1", 1)
    assert channel.unsubscribe("p1") is True
    channel.subscribe("p1")
    assert got(channel.get("p1")) == ("e1", 2)
    assert got(channel.get("p1", "pub/e1")) == ("e2", 1)
    assert got(channel.get("p1", "pub/e2")) is None
    stats = channel.stats()
    assert (stats["unacked"], stats["acked"]) == (0, 2)


def test_housekeeping_drops_idle_partitions_of_a_pull_group(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    channel = make_channel(kind=ChannelKind.TOPIC, clock=clock, partition_idle_s=30.0)
    channel.subscribe("s1")
    channel.publish([event("m1", partition="a"), event("m2", partition="b", ts=2.0)])
    last = None
    for _ in range(3):
        reply = channel.get("s1", last)
        last = uid(reply["event"]) if reply["status"] == "message" else last
    assert len(channel.stats()["groups"]["s1"]["partitions"]) == 2
    channel.housekeep()  # starts the idle clocks
    clock.advance(31)
    channel.get("s1", last)  # a live member: it is not timed out, its partitions are idle
    channel.housekeep()
    assert channel.stats()["groups"]["s1"]["partitions"] == []


def test_a_second_client_with_the_same_id_is_refused_not_given_the_same_messages(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    """Two processes getting as one subscriber id both got (nearly) every message. A get
    must name what the member holds, or what the get that handed it out named (a retry);
    any other is another client's, and is refused while the member holds a message."""
    channel = make_channel(kind=ChannelKind.TOPIC, clock=clock, pull_timeout_s=PULL_TIMEOUT_S)
    channel.subscribe("twin")
    channel.publish([event(f"m{n}", ts=float(n)) for n in range(1, 4)])
    assert got(channel.get("twin")) == ("m1", 1)  # client A
    assert got(channel.get("twin")) == ("m1", 1)  # A's get retried (its reply was lost)
    assert got(channel.get("twin", "pub/m1")) == ("m2", 1)  # A again
    with pytest.raises(SubscriberIdInUse, match="by another client: it holds 'pub/m2'"):
        channel.get("twin")  # client B, starting
    with pytest.raises(SubscriberIdInUse, match="names 'pub/m0'"):
        channel.get("twin", "pub/m0")
    assert got(channel.get("twin", "pub/m1")) == ("m2", 1)  # A's retry still works
    assert got(channel.get("twin", "pub/m2")) == ("m3", 1)
    clock.advance(PULL_TIMEOUT_S + 1)
    channel.housekeep()  # A went quiet: whoever gets next takes the id over
    assert got(channel.get("twin")) == ("m3", 2)
    assert channel.stats()["groups"]["twin"]["members"][0]["acked"] == 2


def test_stats_say_how_long_a_member_has_held_its_oldest_event(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    """A hung handler shows as an age that grows, long before the handler timeout: an
    operator could tell it from a busy one only by acks not moving (session 33)."""
    channel = make_channel(clock=clock, pull_timeout_s=PULL_TIMEOUT_S)
    channel.subscribe("p1")
    assert member(channel, "p1")["oldest_in_flight_s"] == 0.0  # holds nothing
    channel.publish([event("e1"), event("e2", ts=2.0)])
    first = channel.get("p1")["event"]
    clock.advance(7.5)
    assert member(channel, "p1")["oldest_in_flight_s"] == 7.5
    channel.get("p1", uid(first))  # acknowledges e1, takes e2
    clock.advance(1.0)
    assert member(channel, "p1")["oldest_in_flight_s"] == 1.0
