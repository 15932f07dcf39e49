"""What the channel lock covers (issue 15): a batch is validated before the lock is taken;
the invariant publish and get check reads counters, and its full check still finds events
the queues lost. A real EventChannel over the memory store."""

from __future__ import annotations

import logging
import threading

import pytest

from channel_server.errors import InvalidEvent
from tests.inprocess.conftest import ChannelFactory, event


def test_a_bad_batch_is_refused_without_waiting_for_the_lock(make_channel: ChannelFactory) -> None:
    channel = make_channel()
    lock = channel._state.lock  # the channel lock, held here as a long publish would
    refused = threading.Event()

    def publish_bad() -> None:
        with pytest.raises(InvalidEvent):
            channel.publish([event("e1"), {"id": "e2"}])
        refused.set()

    with lock:
        threading.Thread(target=publish_bad, daemon=True).start()
        assert refused.wait(5.0), "validation waited for the channel lock"
    assert channel.stats()["accepted"] == 0


def test_offsets_follow_the_batches_as_before(make_channel: ChannelFactory) -> None:
    channel = make_channel()
    channel.subscribe("p1")
    channel.publish([event("a"), event("b", ts=2.0)])
    channel.publish([event("a"), event("c", ts=3.0)])  # a duplicate still uses its offset
    got = [channel.get("p1")["event"]]
    for _ in range(2):
        last = got[-1]
        got.append(channel.get("p1", f"pub/{last['id']}")["event"])
    assert [(e["id"], e["offset"]) for e in got] == [("a", 0), ("b", 1), ("c", 3)]


def test_lost_events_break_the_full_check_until_the_next_publish_rebuilds_them(
    make_channel: ChannelFactory, caplog: pytest.LogCaptureFixture
) -> None:
    channel = make_channel()
    channel.publish([event("e1"), event("e2", partition=1)])
    channel.check_invariant()
    assert channel.kill_queues() == 2
    with pytest.raises(AssertionError, match=r"holds 2 events, .* its queues have 0"):
        channel.check_invariant()
    with caplog.at_level(logging.WARNING, "channel_server.channel"):
        channel.publish([event("e3")])
    assert "the queues lost 2 events" in caplog.text
    channel.check_invariant()
    assert channel.stats()["groups"]["default"]["backlog"] == 3
