"""Issue 13 in process: an event that cannot cross the wire is dead-lettered instead of
blamed on its subscriber; the member and bytes caps; the bytes queued survive a restart of
the store; and push subscribers cost no thread each."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import Pyro5.server
import pytest
from Pyro5 import config as pyro_config

from channel_server.core.records import ChannelKind
from channel_server.errors import LimitReached, NotSubscribed, QueueFull
from channel_server.events import Event, event_uid
from channel_server.store import MemoryStore
from channel_server.store.base import ChannelRecord
from channel_server.store.sqlite import SQLiteStore
from tests.inprocess.conftest import ChannelFactory, FakeClock, FakeSubscribersDaemon, event
from tests.inprocess.test_push_liveness import ack_all, member, subscriber
from tests.integration.procs import wait_until

POISON = "poison\udc80"
"""No UTF-8 encoder can carry it: the push message cannot be packed."""
INT_KEYS = {1: "an integer map key"}
"""Packs, but a subscriber's msgpack refuses to read it back."""


def store_with(*events: Event) -> MemoryStore:
    """A store holding events accepted before the rules of issue 13 existed (a store is
    the one way such events still reach a channel: validation refuses them now)."""
    store = MemoryStore()
    store.save_channel(ChannelRecord("c", "queue"))
    store.save_group("c", "default", 0)
    store.append("c", list(events), len(events), 0.0)
    return store


def old(offset: int, payload: Any) -> Event:
    return Event(f"old-{offset}", "pub", 0, 0.1 + offset, payload, offset, size=10)


# -- events at fault are dead-lettered ----------------------------------------------------
def test_events_that_cannot_be_pushed_are_dead_lettered_and_the_member_stays(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    # Given a channel restored with two events that cannot cross the wire and a good one
    channel = make_channel(store=store_with(old(0, POISON), old(1, INT_KEYS), old(2, "fine")))
    assert channel.restore() == 3
    # When a subscriber joins and later events are published
    fake, _ = subscriber(channel, daemon, "s1", prefetch=10)
    wait_until(lambda: fake.ids() == ["old-2"], what="the good restored event")
    ack_all(channel, "s1", fake)
    channel.publish([event(f"e{i}", ts=float(i + 1)) for i in range(3)])
    wait_until(lambda: fake.ids() == ["e0", "e1", "e2"], what="later events, in order")
    # Then the two are dead letters with their reason, the rest delivered in order
    letters = {d["id"]: d["error"] for d in channel.dead_letters()}
    assert set(letters) == {"old-0", "old-1"}
    assert "UnicodeEncodeError" in letters["old-0"]
    assert "map key" in letters["old-1"]
    assert all(reason.startswith("cannot be sent to subscribers") for reason in letters.values())
    state = member(channel, "s1")
    assert (state["active"], state["failures"]) == (True, 0)
    ack_all(channel, "s1", fake)
    stats = channel.stats()
    assert (stats["unacked"], stats["queued_bytes"], stats["dead_letters"]) == (0, 0, 2)


def test_a_pull_member_gets_past_an_event_that_cannot_be_sent(
    make_channel: ChannelFactory,
) -> None:
    channel = make_channel(store=store_with(old(0, POISON), old(1, "fine")))
    channel.restore()
    channel.subscribe("p1")
    reply = channel.get("p1")
    assert (reply["status"], reply["event"]["id"]) == ("message", "old-1")
    assert [d["id"] for d in channel.dead_letters()] == ["old-0"]
    uid = event_uid(reply["event"]["publisher_id"], "old-1")
    assert channel.get("p1", uid) == {"status": "empty"}
    assert channel.stats()["unacked"] == 0


# -- members per channel ------------------------------------------------------------------
def test_members_past_the_cap_are_refused_until_one_is_inactive(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon, clock: FakeClock
) -> None:
    channel = make_channel(clock=clock, max_members=2, pull_timeout_s=60.0)
    channel.subscribe("p1")
    subscriber(channel, daemon, "s1")
    with pytest.raises(LimitReached) as info:
        channel.subscribe("p2")  # a pull member
    assert (info.value.resource, info.value.limit) == ("members", 2)
    with pytest.raises(LimitReached):
        subscriber(channel, daemon, "s2")  # a push member
    assert channel.subscribe("p1")["mode"] == "pull"  # a member resuming needs no room
    clock.advance(61.0)
    channel.housekeep()  # p1 made no get for 60 s: inactive
    assert channel.subscribe("p2")["mode"] == "pull"  # takes p1's place
    members = channel.stats()["groups"]["default"]["members"]
    assert sorted(m["id"] for m in members) == ["p2", "s1"]
    with pytest.raises(NotSubscribed):
        channel.get("p1")  # forgotten: it may subscribe again


def test_a_quiet_topic_subscriber_keeps_its_group_and_backlog_at_the_member_cap(
    make_channel: ChannelFactory, clock: FakeClock
) -> None:
    """Its own group is its subscription: room for someone else's new subscriber is not
    made by dropping it with its events (until session 32 it was)."""
    channel = make_channel(kind=ChannelKind.TOPIC, clock=clock, max_members=1)
    channel.subscribe("old")
    channel.publish([event("e1")])
    channel.core.groups["old"].deactivate("old", "gone")
    with pytest.raises(LimitReached):
        channel.subscribe("new")
    stats = channel.stats()
    assert list(stats["groups"]) == ["old"]
    assert stats["unacked"] == 1


# -- bytes queued -------------------------------------------------------------------------
def test_publishing_past_the_bytes_limit_is_refused_like_a_full_queue(
    make_channel: ChannelFactory,
) -> None:
    channel = make_channel(max_payload_bytes=1000, max_queued_bytes=2000)
    big = [dict(event(f"e{i}", ts=float(i)), payload="x" * 998) for i in range(3)]  # 1000 B
    with pytest.raises(QueueFull) as info:
        channel.publish(big)
    err = info.value
    assert (err.limit, err.capacity, err.accepted, err.refused_ids) == ("bytes", 2000, 2, ["e2"])
    assert "2000 bytes queued" in str(err)
    assert channel.stats()["queued_bytes"] == 2000


def test_bytes_queued_are_restored_from_the_store_and_released_by_acks(
    make_channel: ChannelFactory, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "data")
    first = make_channel(store=store)
    payloads = ["text", "ünï ✓", b"\x00\x01", {"k": [1, "v"]}, None]
    first.publish([dict(event(f"e{i}", ts=float(i)), payload=p) for i, p in enumerate(payloads)])
    queued = first.stats()["queued_bytes"]
    assert queued > 0
    first.close()
    store.close()
    second = make_channel(store=SQLiteStore(tmp_path / "data"))
    assert second.restore() == len(payloads)
    assert second.stats()["queued_bytes"] == queued
    second.subscribe("p1")
    last = None
    while (reply := second.get("p1", last))["status"] == "message":
        last = event_uid(reply["event"]["publisher_id"], reply["event"]["id"])
    assert (second.stats()["unacked"], second.stats()["queued_bytes"]) == (0, 0)


# -- threads ------------------------------------------------------------------------------
SUBSCRIBERS = 300


def test_push_subscribers_cost_no_thread_each(
    make_channel: ChannelFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The subscribers' daemon is multiplexed: every thread that appears is the broker's.
    monkeypatch.setattr(pyro_config, "SERVERTYPE", "multiplex")
    fakes_daemon = FakeSubscribersDaemon()
    loop = threading.Thread(target=fakes_daemon.requestLoop, daemon=True)
    loop.start()
    try:
        before = threading.active_count()
        channel = make_channel(max_members=SUBSCRIBERS, dispatch_linger_s=0)
        fakes = [
            subscriber(channel, fakes_daemon, f"s{i}", prefetch=1)[0] for i in range(SUBSCRIBERS)
        ]
        channel.publish([event(f"e{i}", partition=i) for i in range(SUBSCRIBERS)])
        wait_until(lambda: all(f.ids() for f in fakes), 30, "a delivery to every subscriber")
        assert threading.active_count() - before <= 1  # at most a closing link's task
    finally:
        fakes_daemon.shutdown()
        loop.join(5)
        fakes_daemon.close()
