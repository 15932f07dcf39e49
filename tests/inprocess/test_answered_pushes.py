"""Acks in a push's reply, against a real Pyro5 daemon on port 0: each push offers the
subscriber ``answer_wait_s``; acks in the reply are applied as an ack call's would be (its
range only), malformed ones are refused with a log line and change nothing, and a channel
with no wait offers none."""

from __future__ import annotations

import logging
from typing import Any

import Pyro5.api
import Pyro5.server
import pytest

from channel_server.channel import EventChannel
from channel_server.events import event_uid
from tests.inprocess.conftest import CALLBACK_SECRET, ChannelFactory, event
from tests.integration.procs import wait_until


class AnsweringSubscriber:
    """A callback object that answers each push with what ``answer`` makes of it."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.deliveries: list[dict[str, Any]] = []

    @Pyro5.api.expose
    def deliver(self, delivery: dict[str, Any]) -> dict[str, Any]:
        self.deliveries.append(delivery)
        reply: dict[str, Any] = {"queued": len(delivery["events"])}
        if (acks := self.answer(delivery)) is not None:
            reply["acks"] = acks
        return reply

    @Pyro5.api.expose
    def ping(self) -> str:
        return "ok"


def all_acked(delivery: dict[str, Any]) -> dict[str, Any]:
    events = delivery["events"]
    return {
        "from_seq": delivery["seq"],
        "through_seq": delivery["seq"] + len(events) - 1,
        "acked": [event_uid(ev["publisher_id"], ev["id"]) for ev in events],
        "nacked": {},
    }


def subscribe(channel: EventChannel, daemon: Pyro5.server.Daemon, answer: Any):
    fake = AnsweringSubscriber(answer)
    uri = str(daemon.register(fake, "sub.s1"))
    channel.subscribe("s1", uri, callback_secret=CALLBACK_SECRET, prefetch=10)
    return fake


def in_flight(channel: EventChannel) -> int:
    (member,) = channel.stats()["groups"]["default"]["members"]
    return member["in_flight"]


def test_acks_in_the_reply_settle_the_events_without_an_ack_call(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    channel = make_channel(answer_wait_s=0.02)
    fake = subscribe(channel, daemon, all_acked)
    channel.publish([event(f"e{i}", ts=float(i)) for i in range(25)])
    wait_until(lambda: channel.stats()["acked"] == 25, what="every event acked")
    assert [d["answer_s"] for d in fake.deliveries] == [0.02] * len(fake.deliveries)
    assert len(fake.deliveries) >= 3  # prefetch 10: the next push came after each reply
    assert (channel.stats()["unacked"], in_flight(channel)) == (0, 0)


def test_a_reply_skips_only_within_its_own_range(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    """The reply covers the push's seqs but names only its first event: the rest were
    skipped and come back; nothing the member held before that range is touched."""

    def first_only(delivery: dict[str, Any]) -> dict[str, Any]:
        acks = all_acked(delivery)
        return acks | {"acked": acks["acked"][:1]}

    channel = make_channel(answer_wait_s=0.02, dispatch_linger_s=0)
    fake = subscribe(channel, daemon, first_only)
    channel.publish([event(f"e{i}", ts=float(i)) for i in range(3)])
    wait_until(lambda: len(fake.deliveries) >= 2, what="the skipped events again")
    assert [ev["id"] for ev in fake.deliveries[0]["events"]] == ["e0", "e1", "e2"]
    assert [ev["id"] for ev in fake.deliveries[1]["events"]] == ["e1", "e2"]
    assert [ev["attempt"] for ev in fake.deliveries[1]["events"]] == [2, 2]


@pytest.mark.parametrize(
    "answer",
    [
        {"acked": ["pub/e0"]},  # keys missing
        {"from_seq": -1, "through_seq": 9, "acked": [], "nacked": {}},
        {"from_seq": 0, "through_seq": 9, "acked": "pub/e0", "nacked": {}},
        {"from_seq": 0, "through_seq": 9, "acked": [], "nacked": {}, "more": 1},
        ["pub/e0"],
    ],
)
def test_a_malformed_answer_is_refused_and_changes_nothing(
    make_channel: ChannelFactory,
    daemon: Pyro5.server.Daemon,
    caplog: pytest.LogCaptureFixture,
    answer: Any,
) -> None:
    channel = make_channel(answer_wait_s=0.02)
    with caplog.at_level(logging.WARNING, logger="channel_server.channel"):
        fake = subscribe(channel, daemon, lambda _delivery: answer)
        channel.publish([event(f"e{i}", ts=float(i)) for i in range(3)])
        wait_until(lambda: "s1's push reply" in caplog.text, what="the refusal logged")
    assert in_flight(channel) == 3  # still held: the answer counted for nothing
    delivery = fake.deliveries[0]
    acks = all_acked(delivery)
    assert channel.ack("s1", "default", delivery["session"], acks["through_seq"], acks["acked"], {})
    assert (channel.stats()["acked"], in_flight(channel)) == (3, 0)


def test_a_channel_with_no_wait_offers_none(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    channel = make_channel(answer_wait_s=0)
    fake = subscribe(channel, daemon, lambda _delivery: None)
    channel.publish([event("e0")])
    wait_until(lambda: len(fake.deliveries) == 1, what="the push")
    assert "answer_s" not in fake.deliveries[0]
