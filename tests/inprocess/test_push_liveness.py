"""The push side against a real Pyro5 daemon on port 0: deliveries are answered at once and
acknowledged later; failed pushes back off and make a member inactive; a silent member
holding events is pinged; a failure inside a push task does not wedge its member."""

from __future__ import annotations

import logging
from typing import Any

import Pyro5.api
import Pyro5.server
import pytest

from channel_server import after_reply, push
from channel_server.channel import EventChannel
from channel_server.dispatch import DispatchPool
from channel_server.events import event_uid
from tests.inprocess.conftest import CALLBACK_SECRET, ChannelFactory, FakeClock, event
from tests.integration.procs import wait_until

SECRET = CALLBACK_SECRET


class FakeSubscriber:
    """A callback object whose behaviour the test sets; deliveries are recorded."""

    def __init__(self) -> None:
        self.deliveries: list[dict[str, Any]] = []
        self.fail_deliveries = False
        self.alive = True

    @Pyro5.api.expose
    def deliver(self, delivery: dict[str, Any]) -> dict[str, Any]:
        if self.fail_deliveries:
            raise RuntimeError("delivery refused")
        self.deliveries.append(delivery)
        return {"queued": len(delivery["events"])}

    @Pyro5.api.expose
    def ping(self) -> str:
        if not self.alive:
            raise RuntimeError("frozen")
        return "ok"

    def ids(self) -> list[str]:
        return [ev["id"] for d in self.deliveries for ev in d["events"]]


def subscriber(channel: EventChannel, daemon: Pyro5.server.Daemon, sub_id: str, **kw: Any):
    fake = FakeSubscriber()
    uri = str(daemon.register(fake, f"sub.{sub_id}"))
    info = channel.subscribe(sub_id, uri, callback_secret=SECRET, **kw)
    return fake, info


def ack_all(channel: EventChannel, sub_id: str, fake: FakeSubscriber) -> None:
    for d in fake.deliveries:
        last = d["seq"] + len(d["events"]) - 1
        uids = [event_uid(ev["publisher_id"], ev["id"]) for ev in d["events"]]
        assert channel.ack(sub_id, "default", d["session"], last, uids, {}) == {"status": "ok"}
    fake.deliveries.clear()


def member(channel: EventChannel, member_id: str) -> dict:
    members = channel.stats()["groups"]["default"]["members"]
    return next(m for m in members if m["id"] == member_id)


def test_a_push_is_answered_at_once_and_acknowledged_later(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    channel = make_channel()
    fake, info = subscriber(channel, daemon, "s1", prefetch=10)
    assert (info["mode"], info["heartbeat_s"], info["handler_timeout_s"]) == ("push", 2.0, 1800.0)
    channel.publish([event(f"e{i}", ts=float(i)) for i in range(3)])
    wait_until(lambda: len(fake.ids()) == 3, what="the delivery")
    assert fake.ids() == ["e0", "e1", "e2"]
    assert fake.deliveries[0]["session"] == info["session"]
    assert member(channel, "s1")["in_flight"] == 3  # held until the handlers finish
    stale = channel.ack("s1", "default", info["session"] - 1, 3, ["pub/e0"], {})
    assert stale == {"status": "stale"}
    ack_all(channel, "s1", fake)
    stats = channel.stats()
    assert (stats["unacked"], stats["acked"], member(channel, "s1")["in_flight"]) == (0, 3, 0)


def test_failed_pushes_make_the_member_inactive_and_its_work_moves(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    channel = make_channel(retry_backoff_s=0.01, dispatch_linger_s=0)
    bad, _ = subscriber(channel, daemon, "a")
    bad.fail_deliveries = True
    channel.publish([event("e0")])
    wait_until(lambda: not member(channel, "a")["active"], what="a marked inactive")
    assert "push failed, 3 failures in a row" in member(channel, "a")["inactive_reason"]
    good, _ = subscriber(channel, daemon, "b")
    wait_until(lambda: good.ids() == ["e0"], what="e0 moved to b")
    assert good.deliveries[0]["events"][0]["attempt"] == 4


def test_a_silent_member_holding_events_is_pinged_then_declared_dead(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    channel = make_channel(ack_timeout_s=0.3, liveness_timeout_s=0.3, retry_backoff_s=0.01)
    slow, _ = subscriber(channel, daemon, "a")
    channel.publish([event("e0")])
    wait_until(lambda: slow.ids() == ["e0"], what="the delivery")
    # A long job: silent, but it answers pings, so it stays (delivery is what is judged).
    wait_until(lambda: channel.housekeep() or member(channel, "a")["seen_s_ago"] < 0.3, 3)
    assert member(channel, "a")["active"] is True
    slow.alive = False  # frozen: pings fail now
    wait_until(
        lambda: channel.housekeep() or not member(channel, "a")["active"], 5, "a declared dead"
    )
    assert member(channel, "a")["inactive_reason"].startswith("no answer to pings")
    assert channel.stats()["groups"]["default"]["partitions"][0]["owner"] is None


def test_a_failure_inside_a_push_task_does_not_wedge_its_member(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = make_channel(dispatch_linger_s=0)
    original = push.PushDelivery._observe_delay
    calls = {"n": 0}

    def failing_once(self: Any, *args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected: a bug after a push")
        original(self, *args)

    monkeypatch.setattr(push.PushDelivery, "_observe_delay", failing_once)
    fake, _ = subscriber(channel, daemon, "s1", prefetch=1)
    channel.publish([event("e0"), event("e1", ts=2.0)])
    wait_until(lambda: fake.ids() == ["e0"], what="first delivery")
    ack_all(channel, "s1", fake)
    wait_until(lambda: fake.ids() == ["e1"], what="the member keeps being served")
    ack_all(channel, "s1", fake)
    assert channel.stats()["unacked"] == 0
    # e1's delivery is observed once its push returns, which may be after the fake has
    # recorded it: wait for it
    wait_until(lambda: calls["n"] >= 2, what="the second push observed")


def test_a_heartbeat_holding_nothing_gets_lost_deliveries_again(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    channel = make_channel(ack_timeout_s=0.2, dispatch_linger_s=0)
    fake, info = subscriber(channel, daemon, "s1", prefetch=10)
    channel.publish([event("e0"), event("e1", ts=2.0)])
    wait_until(lambda: fake.ids() == ["e0", "e1"], what="the delivery")
    fake.deliveries.clear()  # the subscriber lost them (a stale push replaced them)
    session = info["session"]
    assert channel.heartbeat("s1", "default", session, 2) == {"status": "active"}
    assert member(channel, "s1")["in_flight"] == 2  # it says it holds them: nothing moves

    def given_again() -> bool:
        channel.heartbeat("s1", "default", session, 0)
        return fake.ids() == ["e0", "e1"]

    wait_until(given_again, 5, "the lost events delivered again")
    assert [ev["attempt"] for ev in fake.deliveries[0]["events"]] == [2, 2]


def test_a_member_holding_nothing_unacknowledged_gets_an_event_at_once(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    """Nagle's rule: nothing to wait for, so a first event does not wait the linger."""
    channel = make_channel(dispatch_linger_s=60.0)
    fake, _ = subscriber(channel, daemon, "s1", prefetch=10)
    channel.publish([event("e0")])
    wait_until(lambda: fake.ids() == ["e0"], timeout_s=10.0, what="e0, long before the linger")


def test_events_for_a_member_holding_unacknowledged_ones_wait_for_its_ack(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    """The events published while the member holds e0 go together once it acks e0, long
    before the 60 s linger ends."""
    channel = make_channel(dispatch_linger_s=60.0)
    fake, _ = subscriber(channel, daemon, "s1", prefetch=10)
    channel.publish([event("e0", partition=0)])
    wait_until(lambda: fake.ids() == ["e0"], what="the first event")
    channel.publish([event("e1", partition=1)])
    channel.publish([event("e2", partition=2)])
    assert fake.ids() == ["e0"]  # e0 is not acknowledged: the others wait
    ack_all(channel, "s1", fake)
    wait_until(lambda: len(fake.ids()) == 2, timeout_s=10.0, what="the events after the ack")
    assert fake.ids() == ["e1", "e2"]  # one push
    assert len(fake.deliveries) == 1


def test_events_waiting_for_an_ack_go_when_the_linger_ends(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon, clock: FakeClock
) -> None:
    """On the channel's clock (standing still, then moved past the linger): the member
    never acks e0, and the events published after it go together when the linger ends."""
    channel = make_channel(clock=clock, dispatch_linger_s=0.05)
    fake, _ = subscriber(channel, daemon, "s1", prefetch=10)
    channel.publish([event("e0", partition=0)])
    wait_until(lambda: fake.ids() == ["e0"], what="the first event")
    channel.publish([event("e1", partition=1)])
    channel.publish([event("e2", partition=2)])
    assert fake.ids() == ["e0"]  # within the linger of the last push: the clock stands
    clock.advance(0.05)
    wait_until(lambda: len(fake.deliveries) == 2, what="the lingering events")
    assert [ev["id"] for ev in fake.deliveries[1]["events"]] == ["e1", "e2"]


def test_a_member_that_rejoins_while_its_events_wait_for_an_ack_gets_them_at_once(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon
) -> None:
    """Leaving ends the wait for the ack it will never send: the events it held and the
    one that waited go to its new session long before the 60 s linger ends."""
    channel = make_channel(dispatch_linger_s=60.0)
    fake, info = subscriber(channel, daemon, "s1", prefetch=10)
    channel.publish([event("e0", partition=0)])
    wait_until(lambda: fake.ids() == ["e0"], what="the first event")
    channel.publish([event("e1", partition=1)])  # waits for e0's ack
    lingering = channel._publishing._push._lingering  # the push side's record (white box)
    wait_until(lambda: ("default", "s1") in lingering, what="e1 waiting for e0's ack")
    assert channel.unsubscribe("s1", "default")
    fake.deliveries.clear()
    again = channel.subscribe("s1", str(daemon.uriFor(fake)), callback_secret=SECRET, prefetch=10)
    assert again["session"] != info["session"]
    wait_until(lambda: sorted(fake.ids()) == ["e0", "e1"], timeout_s=10.0, what="both again")


def e1_waits_for_e2(channel: EventChannel, fake: FakeSubscriber) -> None:
    """e1 (published) waits for more (a linger) for s1, holding nothing; e2 then goes with
    it in one push."""
    streamed = channel._publishing._push._streamed  # the push side's record (white box)
    wait_until(lambda: ("default", "s1") in streamed, what="e1 lingering")
    channel.publish([event("e2", partition=2)])
    wait_until(lambda: len(fake.ids()) == 2, timeout_s=10.0, what="the events that waited")
    assert [ev["id"] for ev in fake.deliveries[0]["events"]] == ["e1", "e2"]


def test_events_streaming_to_a_member_holding_nothing_wait_the_stream_linger_together(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon, clock: FakeClock
) -> None:
    """Publishes streaming in (the clock stands: no gap between them) to a member holding
    nothing: the next events wait the stream linger once and go in one push; without it
    e1 would go alone at once and e2 wait for e1's ack (a 60 s linger)."""
    channel = make_channel(clock=clock, dispatch_linger_s=60.0, stream_linger_s=1.0)
    fake, _ = subscriber(channel, daemon, "s1", prefetch=10)
    channel.publish([event("e0", partition=0)])
    wait_until(lambda: fake.ids() == ["e0"], what="the first event, at once")
    ack_all(channel, "s1", fake)
    channel.publish([event("e1", partition=1)])
    e1_waits_for_e2(channel, fake)


def test_a_publish_after_a_pause_goes_to_a_member_holding_nothing_at_once(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon, clock: FakeClock
) -> None:
    """Publishes 1,000 s apart are no stream: e1 is not held back for the (60 s) linger."""
    channel = make_channel(clock=clock, dispatch_linger_s=60.0, stream_linger_s=60.0)
    fake, _ = subscriber(channel, daemon, "s1", prefetch=10)
    channel.publish([event("e0", partition=0)])
    wait_until(lambda: fake.ids() == ["e0"], what="the first event, at once")
    ack_all(channel, "s1", fake)
    clock.advance(1000.0)
    channel.publish([event("e1", partition=1)])
    wait_until(lambda: fake.ids() == ["e1"], what="e1 at once, not after the linger")


class MachineClock:
    """A machine's CPU times the test drives: two CPUs, ``in_use`` of their time busy."""

    def __init__(self) -> None:
        self.times = (0.0, 0.0)

    def __call__(self) -> tuple[float, float]:
        return self.times

    def run(self, seconds: float, in_use: float) -> None:
        self.times = (self.times[0] + 2 * seconds * in_use, self.times[1] + 2 * seconds)


def pushed_once(
    make_channel: ChannelFactory,
    daemon: Pyro5.server.Daemon,
    clock: FakeClock,
    machine: MachineClock | None = None,
    **config: Any,
) -> tuple[EventChannel, FakeSubscriber, FakeClock]:
    """A channel whose CPU clocks the test drives (standing still), no stream linger, and
    s1, pushed e0 and done with it a second ago. Returns the CPU clock too."""
    cpu = FakeClock(0.0)
    channel = make_channel(
        clock=clock,
        cpu_clock=cpu,
        machine_clock=machine,
        dispatch_linger_s=60.0,
        stream_linger_s=0.0,
        **config,
    )
    fake, _ = subscriber(channel, daemon, "s1", prefetch=10)
    channel.publish([event("e0", partition=0)])
    wait_until(lambda: fake.ids() == ["e0"], what="the first event, at once")
    ack_all(channel, "s1", fake)
    clock.advance(1.0)
    return channel, fake, cpu


def test_on_a_busy_broker_a_short_push_waits_to_fill(
    make_channel: ChannelFactory,
    daemon: Pyro5.server.Daemon,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker's CPU clock runs as fast as the channel's (a busy broker): e1, short and
    for a member holding nothing, waits the busy linger (no stream linger here), and e2
    joins it in one push; without it e1 would go alone and e2 wait for e1's ack (60 s)."""
    channel, fake, cpu = pushed_once(make_channel, daemon, clock, busy_linger_s=0.5)
    cpu.advance(1.0)  # a second of one core: busy from the next publish on
    with caplog.at_level(logging.INFO, "channel_server.channel"):
        channel.publish([event("e1", partition=1)])
    said = "used 100 % of a core, and the CPUs it runs on were 0 % busy over the last second"
    assert f"{said}: short pushes wait to fill" in caplog.text
    e1_waits_for_e2(channel, fake)


def test_on_a_saturated_machine_half_the_busy_share_makes_a_short_push_wait(
    make_channel: ChannelFactory,
    daemon: Pyro5.server.Daemon,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker used 0.4 of a core (short of --busy-cpu 0.8) while its machine's CPUs
    were 90 % in use (its subscribers took the rest): busy, so e1 waits and e2 joins it."""
    machine = MachineClock()
    channel, fake, cpu = pushed_once(
        make_channel, daemon, clock, machine, busy_linger_s=0.5, busy_cpu=0.8, busy_machine=0.75
    )
    cpu.advance(0.4)
    machine.run(1.0, 0.9)
    with caplog.at_level(logging.INFO, "channel_server.channel"):
        channel.publish([event("e1", partition=1)])
    said = "used 40 % of a core, and the CPUs it runs on were 90 % busy over the last second"
    assert f"{said}: short pushes wait to fill" in caplog.text
    figures = {k: channel.stats()[k] for k in ("broker_cpu_share", "machine_cpu_share", "busy")}
    assert figures == {"broker_cpu_share": 0.4, "machine_cpu_share": 0.9, "busy": True}
    e1_waits_for_e2(channel, fake)


def test_on_a_machine_busy_with_other_work_an_idle_broker_does_not_wait(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon, clock: FakeClock
) -> None:
    """The machine's CPUs all in use, the broker at 0.1 of a core: e1 goes at once, not
    after the (60 s) busy linger."""
    machine = MachineClock()
    channel, fake, cpu = pushed_once(make_channel, daemon, clock, machine, busy_linger_s=60.0)
    cpu.advance(0.1)
    machine.run(1.0, 1.0)
    channel.publish([event("e1", partition=1)])
    wait_until(lambda: fake.ids() == ["e1"], timeout_s=10.0, what="e1 at once")
    stats = channel.stats()
    assert (stats["busy"], stats["broker_cpu_share"], stats["machine_cpu_share"]) == (
        False,
        0.1,
        1.0,
    )


def test_on_a_broker_not_busy_a_short_push_goes_at_once(
    make_channel: ChannelFactory, daemon: Pyro5.server.Daemon, clock: FakeClock
) -> None:
    """The same publishes with the CPU clock standing still: e1 is not held back for the
    (60 s) busy linger."""
    channel, fake, _ = pushed_once(make_channel, daemon, clock, busy_linger_s=60.0)
    channel.publish([event("e1", partition=1)])
    wait_until(lambda: fake.ids() == ["e1"], timeout_s=10.0, what="e1 at once")


def test_the_push_an_ack_makes_goes_from_the_acking_thread_after_the_reply(
    make_channel: ChannelFactory, pool: DispatchPool, daemon: Pyro5.server.Daemon
) -> None:
    """No pool thread is woken for it (a thread hand-off costs more than the push)."""
    channel = make_channel(stream_linger_s=0)
    fake, _ = subscriber(channel, daemon, "s1", prefetch=1)
    channel.publish([event("e0", ts=0.0), event("e1", ts=1.0)])
    wait_until(lambda: fake.ids() == ["e0"], what="the first push")
    pool.stop()  # from here on, only the acking thread can push
    with after_reply.serving():  # as the daemon serves the ack
        ack_all(channel, "s1", fake)
        assert fake.ids() == []  # not while the ack is served: after its reply
    assert fake.ids() == ["e1"]
