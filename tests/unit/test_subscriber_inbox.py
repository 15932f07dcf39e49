"""The subscriber's inbox: sessions only move forward, a newer one drops the older's rest;
and its outbox: ack messages over ranges that never overlap, a push's thread answering
with the acks the worker finished while the control thread holds back, and everything sent
when it stops."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from channel_server.errors import LimitReached, NotAuthorized
from subscriber import control
from subscriber import inbox as inbox_module
from subscriber.client import Subscriber
from subscriber.control import ChannelSession, Identity
from subscriber.inbox import ACK_BATCH_MAX, AckMessage, Inbox, Outbox, Outcome, StaleSession
from subscriber.processed import ProcessedIds
from tests.integration.procs import wait_until


def ids(inbox: Inbox) -> list[str]:
    return [item.event["id"] for item in inbox.take_all(0.0)]


def test_a_newer_session_drops_what_is_left_of_the_older_one() -> None:
    inbox = Inbox()
    inbox.put(5, 1, [{"id": "a"}, {"id": "b"}])
    inbox.put(7, 1, [{"id": "c"}])
    assert (inbox.session, ids(inbox)) == (7, ["c"])


def test_a_late_push_of_an_older_session_is_refused_and_drops_nothing() -> None:
    inbox = Inbox()
    inbox.put(7, 1, [{"id": "c"}])
    with pytest.raises(StaleSession):
        inbox.put(5, 3, [{"id": "old"}])
    inbox.adopt(6)  # a late answer naming an older session: ignored too
    assert (inbox.session, inbox.count(7), ids(inbox)) == (7, 1, ["c"])
    inbox.adopt(8)
    assert inbox.session == 8 and inbox.count(7) == 0


def test_an_ended_session_drops_its_events_and_refuses_its_late_pushes() -> None:
    """The channel said session 7 is over (the id taken over from elsewhere) and no new
    one could be had: none of its events may be handled, queued or still to come."""
    inbox = Inbox()
    inbox.put(7, 1, [{"id": "a"}, {"id": "b"}])
    inbox.end(7)
    assert (inbox.current(7), ids(inbox)) == (False, [])
    with pytest.raises(StaleSession):
        inbox.put(7, 3, [{"id": "late"}])
    inbox.end(6)  # an older one: nothing changes
    inbox.adopt(9)  # subscribed again
    inbox.put(9, 1, [{"id": "c"}])
    assert (inbox.current(9), ids(inbox)) == (True, ["c"])


def test_counts_are_per_session() -> None:
    inbox, outbox = Inbox(), Outbox()
    inbox.put(3, 1, [{"id": "a"}, {"id": "b"}])
    outbox.add([Outcome(3, 1, "x"), Outcome(2, 9, "y")], urgent=False)
    assert (inbox.count(3), inbox.count(2), outbox.count(3), outbox.count(2)) == (2, 0, 1, 1)


def channel_session(outbox: Outbox) -> ChannelSession:
    """A control thread's session of subscriber s1, not connected (the test sets _remote)."""
    who = Identity("127.0.0.1", 1, "c", "s1", "PYRO:x@127.0.0.1:2", "secret", "g", None, 1.0, 1.0)
    return ChannelSession(who, Inbox(), outbox, ProcessedIds(), lambda: 0.0, lambda _: 0)


class _Channel:
    """What the session calls, recorded (a stand-in for the channel's RemoteChannel)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def call(self, method: str, *args: Any) -> dict[str, str]:
        self.calls.append((method, args))
        return {"status": "ok"}

    def release(self) -> None:
        pass


HEARTBEAT_S = 0.3


class _RefusingChannel(_Channel):
    """A channel that refuses every call (an expired certificate, a user no longer let
    in), noting when each came."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def call(self, method: str, *args: Any) -> dict[str, str]:
        super().call(method, *args)
        self.at.append(time.monotonic())
        raise self.refusal(method)

    @staticmethod
    def refusal(method: str) -> Exception:
        return LimitReached(f"refused {method}", 1, "the test")


def test_a_refused_heartbeat_waits_its_interval_before_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refusal is an answer: the next heartbeat comes a heartbeat later (a refused one
    left the last contact as it was, so the control thread sent another at once, over
    and over: 33,947 calls in 0.2 s)."""
    session = channel_session(Outbox())
    session._heartbeat_s = HEARTBEAT_S
    channel = _RefusingChannel()
    session._remote = channel  # type: ignore[assignment]
    session.session = 1
    session._last_contact = time.monotonic() - 10.0  # a heartbeat is due
    thread = threading.Thread(target=session._serve)
    thread.start()
    try:
        wait_until(lambda: len(channel.at) >= 2, 10 * HEARTBEAT_S, "a second heartbeat")
    finally:
        session.finish(unsubscribe=False)
        thread.join(10.0)
    first, second = channel.at[:2]
    assert [method for method, _ in channel.calls[:2]] == ["heartbeat", "heartbeat"]
    assert second - first >= HEARTBEAT_S, f"the next heartbeat {second - first:.6f} s later"
    assert "heartbeat refused by the channel" in caplog.text


class _RevokingChannel(_RefusingChannel):
    @staticmethod
    def refusal(method: str) -> Exception:
        return NotAuthorized(f"user 'bob' may not: {method}")


def test_a_heartbeat_refused_as_not_authorized_ends_the_control_thread() -> None:
    """The user left the users file or lost its grant: retrying for ever (an error every
    2 s) kept the process alive and useless; the subscriber stops instead (its
    ``failure``, the CLI's exit 1)."""
    session = channel_session(Outbox())
    session._remote = _RevokingChannel()  # type: ignore[assignment]
    session.session = 1
    session._last_contact = time.monotonic() - 10.0  # a heartbeat is due
    with pytest.raises(NotAuthorized, match="may not: heartbeat"):
        session._serve()


def test_a_stop_sends_every_outcome_left_not_only_one_message_of_them() -> None:
    """More outcomes than one ack message holds (a broker away for a while, a large
    prefetch): all are acknowledged before the unsubscribe, in order."""
    outbox = Outbox()
    outcomes = [Outcome(7, seq, f"p/{seq}") for seq in range(1, 2 * ACK_BATCH_MAX + 101)]
    outbox.add(outcomes, urgent=False)
    session = channel_session(outbox)
    channel = _Channel()
    session._remote = channel  # type: ignore[assignment]
    session.finish(unsubscribe=True)
    session._serve()
    acks = [args for method, args in channel.calls if method == "ack"]
    acked = [uid for args in acks for uid in args[4]]
    assert acked[: len(outcomes)] == [o.uid for o in outcomes]
    assert [len(args[4]) for args in acks[:3]] == [ACK_BATCH_MAX, ACK_BATCH_MAX, 100]
    assert channel.calls[-1][0] == "unsubscribe"


def done(session: int, *seqs: int, error: str | None = None) -> list[Outcome]:
    return [Outcome(session, seq, f"p/{seq}", error) for seq in seqs]


def test_ack_messages_cover_ranges_that_follow_on_once_answers_are_offered() -> None:
    """Each message starts where the session's previous one ended, so a skipped seq (here
    3) falls in exactly one. Only a session whose pushes offered answers says where: the
    broker of another (a restart, maybe older) need not take it."""
    outbox = Outbox()
    outbox.add(done(5, 1), urgent=True)
    assert outbox.drain() == [AckMessage(5, None, 1, ["p/1"], {})]
    assert outbox.answer(5, 1, 0.0) is None  # an offer; nothing to answer with yet
    outbox.add(done(5, 2) + done(5, 4, error="E"), urgent=True)
    assert outbox.drain() == [AckMessage(5, 2, 4, ["p/2"], {"p/4": "E"})]
    outbox.add(done(5, 5) + done(6, 1, 2), urgent=True)
    assert outbox.drain() == [
        AckMessage(5, 5, 5, ["p/5"], {}),
        AckMessage(6, None, 2, ["p/1", "p/2"], {}),  # no offer in session 6 yet
    ]
    assert outbox.answer(6, 3, 0.0) is None
    outbox.add(done(6, 3), urgent=True)
    assert outbox.drain() == [AckMessage(6, 3, 3, ["p/3"], {})]


def test_a_push_thread_answers_with_the_outcomes_of_its_push_and_the_control_thread_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inbox_module, "ANSWER_WAIT_MAX_S", 30.0)  # it waits past wait(0.05)
    outbox = Outbox()
    outbox.add(done(5, 1), urgent=True)  # the worker is part way through the push
    answers: list[AckMessage | None] = []
    thread = threading.Thread(target=lambda: answers.append(outbox.answer(5, 2, 10.0)))
    thread.start()
    wait_until(lambda: outbox._answering == 1, what="the push thread waiting")
    assert outbox.wait(0.05) == []  # urgent, but a push thread will answer with them
    woken: list[str] = []  # the control thread's condition: nobody need wake it now
    outbox._cond.notify = lambda n=1: woken.append("notify")  # type: ignore[method-assign]
    outbox._cond.notify_all = lambda: woken.append("all")  # type: ignore[method-assign]
    outbox.add(done(5, 2), urgent=True)
    thread.join(10.0)
    assert answers == [AckMessage(5, 0, 2, ["p/1", "p/2"], {})]
    assert woken == []  # and the answer left nothing for it
    assert outbox.drain() == []


def test_the_control_thread_sleeps_while_a_push_thread_waits_to_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outcomes older than the linger, held for a push's answer: the control thread has
    nothing to send until the answer ends, and waits for that (it spun on wait(0), with
    the GIL, for as long as the push thread waited)."""
    monkeypatch.setattr(inbox_module, "ANSWER_WAIT_MAX_S", 30.0)
    outbox = Outbox()
    outbox.add(done(5, 1), urgent=True)
    outbox._oldest -= 1.0  # they have waited long past ACK_LINGER_S
    answers: list[AckMessage | None] = []
    thread = threading.Thread(target=lambda: answers.append(outbox.answer(5, 2, 10.0)))
    thread.start()
    try:
        wait_until(lambda: outbox._answering == 1, what="the push thread waiting")
        waits: list[float] = []
        inner = outbox._cond.wait

        def counted(timeout: float | None = None) -> bool:
            waits.append(-1.0 if timeout is None else timeout)
            return inner(timeout)

        outbox._cond.wait = counted  # type: ignore[method-assign]
        assert outbox.wait(0.2) == []
        assert len(waits) <= 2, f"{len(waits)} waits, {sum(w == 0 for w in waits)} of 0 s"
    finally:
        outbox.add(done(5, 2), urgent=True)
        thread.join(10.0)
    assert answers == [AckMessage(5, 0, 2, ["p/1", "p/2"], {})]


def test_a_push_thread_does_not_wait_for_outcomes_sent_already(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker finished the push and the control thread sent its acks before the
    push's thread began to answer: it answers without acks at once (it waited its whole
    wait for outcomes that would never come)."""
    monkeypatch.setattr(inbox_module, "ANSWER_WAIT_MAX_S", 30.0)
    outbox = Outbox()
    outbox.add(done(5, 1, 2), urgent=True)
    assert outbox.wait(0.0) == [AckMessage(5, None, 2, ["p/1", "p/2"], {})]
    waits: list[float | None] = []
    outbox._answerable.wait = lambda timeout=None: bool(waits.append(timeout))  # type: ignore[method-assign]
    assert outbox.answer(5, 2, 10.0) is None
    assert waits == []


def test_an_answer_gives_up_after_its_wait_and_leaves_another_sessions_outcomes() -> None:
    outbox = Outbox()
    outbox.add(done(5, 1), urgent=False)
    assert outbox.answer(5, 3, 0.01) == AckMessage(5, 0, 1, ["p/1"], {})  # what is done
    outbox.add(done(5, 2) + done(6, 1), urgent=False)
    assert outbox.answer(6, 1, 0.01) is None  # session 5's outcome goes by the control thread
    assert [m.session for m in outbox.drain()] == [5, 6]


def test_a_message_whose_push_was_given_up_on_is_sent_next_by_the_control_thread() -> None:
    """Its reply would be lost with the acks in it: the control thread sends it first,
    before outcomes that came after, and counts it as held until then."""
    outbox = Outbox()
    outbox.add(done(5, 1, 2), urgent=False)
    message = outbox.answer(5, 2, 0.01)
    assert message == AckMessage(5, 0, 2, ["p/1", "p/2"], {})
    outbox.add(done(5, 3), urgent=True)
    outbox.unanswered(message)
    assert outbox.count(5) == 3
    assert outbox.wait(0.0) == [message]
    assert outbox.wait(0.0) == [AckMessage(5, 3, 3, ["p/3"], {})]
    outbox.unanswered(message)
    assert outbox.drain() == [message]  # a stop sends it too


@pytest.mark.parametrize("offer", [5.0, None, 0, "5.0"])
def test_a_push_is_answered_with_acks_only_when_the_channel_offers_a_wait(
    offer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox_module, "ANSWER_WAIT_MAX_S", 30.0)  # a slow machine's worker
    sub = Subscriber("c", "s1", lambda ev: None)
    sub._spawn("worker", sub._work)
    try:
        events = [{"id": f"e{n}", "publisher_id": "P", "partition": 0} for n in range(3)]
        push: dict[str, Any] = {"session": 1, "seq": 7, "events": events}
        reply = sub._take_in(push if offer is None else push | {"answer_s": offer})
    finally:
        sub._stopping.set()
        sub._inbox.close()
        sub._join("worker")
    if offer == 5.0:
        acks = {"from_seq": 0, "through_seq": 9, "acked": ["P/e0", "P/e1", "P/e2"], "nacked": {}}
        assert reply == {"queued": 3, "acks": acks}
    else:
        assert reply == {"queued": 3}


class _SlowLink(_Channel):
    """A channel whose answers come ``delay_s`` (a fake clock's) after the call was sent,
    each heartbeat answered ``status``."""

    def __init__(self, clock: list[float], delay_s: float, status: str = "active") -> None:
        super().__init__()
        self.clock, self.delay_s, self.status = clock, delay_s, status

    def call(self, method: str, *args: Any) -> dict[str, Any]:
        super().call(method, *args)
        self.clock[0] += self.delay_s
        if method == "subscribe":
            return {"group": "g", "session": 1, "heartbeat_s": 2.0, "ack_timeout_s": 1.0}
        return {"status": self.status}


@pytest.mark.parametrize(("delay_s", "fresh"), [(0.1, True), (0.6, False)])
def test_our_standing_is_fresh_only_if_confirmed_by_a_call_sent_within_the_fence(
    monkeypatch: pytest.MonkeyPatch, delay_s: float, fresh: bool
) -> None:
    """A push read on a link slower than the ack timeout is stale whether or not the
    broker's closing arrived before it (session 36's network probe): a confirmation
    counts from when its call was sent, and lasts half the channel's ack timeout."""
    clock = [100.0]
    monkeypatch.setattr(control.time, "monotonic", lambda: clock[0])
    session = channel_session(Outbox())
    session._remote = _SlowLink(clock, delay_s)  # type: ignore[assignment]
    session._subscribe()
    assert session.fresh() is fresh  # the fence: 0.5 s of the 1 s ack timeout
    clock[0] += 0.5
    assert not session.fresh()  # nothing since
    session._heartbeat()
    assert session.fresh() is fresh


def test_a_heartbeat_that_says_we_were_dropped_confirms_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(control.time, "monotonic", lambda: clock[0])
    session = channel_session(Outbox())
    link = _SlowLink(clock, 0.0)
    session._remote = link  # type: ignore[assignment]
    session._subscribe()
    clock[0] += 0.6
    link.status = "unknown"
    session._rejoin = lambda status, reply: False  # type: ignore[method-assign]
    session._heartbeat()
    assert not session.fresh()


def test_heartbeats_come_before_a_confirmation_runs_out_and_checks_are_paced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A heartbeat is due half a fence after the last call (the channel's ack timeout 1 s:
    the fence 0.5 s, a heartbeat 0.25 s after), and a standing check asked for right after
    a call waits STANDING_GAP_S: one answered by a stale confirmation, or refused, is not
    asked again in a tight loop."""
    clock = [100.0]
    monkeypatch.setattr(control.time, "monotonic", lambda: clock[0])
    session = channel_session(Outbox())
    session._remote = _SlowLink(clock, 0.0)  # type: ignore[assignment]
    session._subscribe()
    session._contact()
    assert session._until_heartbeat() == pytest.approx(0.25)
    session._check_standing = True
    assert not session._standing_due()
    clock[0] += control.STANDING_GAP_S
    assert session._standing_due()
