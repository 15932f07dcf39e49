"""The subscriber's worker on a chunk of pushed events: the handler runs once per event
uid, an event seen before is acknowledged without it, a failure is a nack the window does
not remember, and the outcomes reach the outbox in delivery order."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from subscriber import client
from subscriber.client import Subscriber
from subscriber.processed import ProcessedIds
from tests.integration.procs import wait_until


def event(event_id: str, publisher: str = "P", partition: int = 0) -> dict[str, Any]:
    return {"id": event_id, "publisher_id": publisher, "partition": partition, "payload": "x"}


RETURNED = "(returned)"


def handle(sub: Subscriber, events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """Push ``events`` in one session and run the worker on them as one chunk; what the
    next ack will say of each: None (acked), the nack's error, or RETURNED."""
    sub._take_in({"session": 1, "seq": 1, "events": events})
    sub._handle(sub._inbox.take_all(0.0))
    return [(o.uid, RETURNED if o.returned else o.error) for o in sub._outbox._pending]


def test_an_event_twice_in_one_chunk_runs_the_handler_once() -> None:
    ran: list[str] = []
    sub = Subscriber("c", "s1", lambda ev: ran.append(ev["id"]))
    outcomes = handle(sub, [event("a"), event("b"), event("a"), event("a", "Q")])
    assert ran == ["a", "b", "a"]  # Q's "a" is another event
    assert outcomes == [("P/a", None), ("P/b", None), ("P/a", None), ("Q/a", None)]
    assert sub._processed.known(["P/a", "P/b", "Q/a", "P/z"]) == {"P/a", "P/b", "Q/a"}


def test_an_event_in_the_window_is_acknowledged_without_the_handler() -> None:
    ran: list[str] = []
    window = ProcessedIds()
    window.add(["P/a"])
    sub = Subscriber("c", "s1", lambda ev: ran.append(ev["id"]), processed=window)
    assert handle(sub, [event("a"), event("b")]) == [("P/a", None), ("P/b", None)]
    assert ran == ["b"]


def test_a_failed_event_is_not_remembered_and_runs_again_when_redelivered() -> None:
    calls: list[str] = []

    def flaky(ev: dict[str, Any]) -> None:
        calls.append(ev["id"])
        if calls.count(ev["id"]) == 1:
            raise ValueError("first try fails")

    sub = Subscriber("c", "s1", flaky)
    assert handle(sub, [event("a")]) == [("P/a", "ValueError: first try fails")]
    assert sub._processed.known(["P/a"]) == set()
    sub._outbox._pending.clear()
    assert handle(sub, [event("a")]) == [("P/a", None)]  # delivered again: runs again
    assert calls == ["a", "a"]
    assert sub._processed.known(["P/a"]) == {"P/a"}


@pytest.mark.parametrize(
    "raised", [SystemExit(3), asyncio.CancelledError("cancelled"), KeyboardInterrupt()]
)
def test_a_handler_raising_outside_exception_nacks_its_event_and_the_worker_goes_on(
    raised: BaseException,
) -> None:
    """Not an Exception (sys.exit in a handler, asyncio's cancellation) ended the worker
    thread, and the process lived on taking pushes that nobody handled."""

    def handler(ev: dict[str, Any]) -> None:
        if ev["id"] == "b":
            raise raised

    sub = Subscriber("c", "s1", handler)
    assert handle(sub, [event("a"), event("b"), event("c", partition=1)]) == [
        ("P/a", None),
        ("P/b", f"{type(raised).__name__}: {raised}"),
        ("P/c", None),
    ]


def test_after_a_failure_the_rest_of_its_partition_is_returned_unhandled() -> None:
    """A partition is processed in order: once an event fails, the later events of its
    partition in the push are given back (delivered again after its retry); other
    partitions go on."""
    ran: list[str] = []

    def fails_on_b(ev: dict[str, Any]) -> None:
        ran.append(ev["id"])
        if ev["id"] == "b":
            raise ValueError("no")

    sub = Subscriber("c", "s1", fails_on_b)
    pushed = [event("a"), event("b"), event("x", partition=1), event("c"), event("b", "Q")]
    assert handle(sub, pushed) == [
        ("P/a", None),
        ("P/b", "ValueError: no"),
        ("P/x", None),
        ("P/c", RETURNED),
        ("Q/b", "ValueError: no"),  # another publisher's partition 0: its own sub-queue
    ]
    assert ran == ["a", "b", "x", "b"]
    assert sub._processed.known(["P/a", "P/b", "P/x", "P/c"]) == {"P/a", "P/x"}
    (message,) = sub._outbox._take()
    assert (message.acked, message.returned) == (["P/a", "P/x"], ["P/c"])
    assert message.as_answer()["returned"] == ["P/c"]


def test_a_stop_that_waits_for_a_long_handler_says_so_as_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Ctrl-C in a script without logging set up shows warnings only (Python's last
    resort handler): a stop waiting for a long job must not be silent."""
    sub = Subscriber("c", "s1", lambda ev: None)
    sub._busy_since = time.monotonic() - 30.0  # its worker has been in a handler 30 s
    with caplog.at_level(logging.INFO, logger="subscriber.client"):
        sub.stop()
    (record,) = [r for r in caplog.records if "finishing the event in hand" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "its handler has run 30 s" in record.getMessage()


class WatchedEvent(threading.Event):
    """A trusted flag that says when someone waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.set()
        return super().wait(timeout)


def test_an_event_after_a_wait_for_standing_counts_its_time_from_the_wait() -> None:
    """After a freeze the worker waits while the control thread checks its standing; the
    handler's clock (what a long-handler check reads) starts after that wait, not before."""
    busy_since: list[float] = []
    sub = Subscriber("c", "s1", lambda ev: busy_since.append(sub._busy_since or 0.0))
    trusted = WatchedEvent()
    sub._session = SimpleNamespace(  # type: ignore[assignment]
        trusted=trusted, fresh=lambda: True, distrust=trusted.clear
    )
    sub._take_in({"session": 1, "seq": 1, "events": [event("a")]})
    worker = threading.Thread(target=sub._handle, args=(sub._inbox.take_all(0.0),))
    worker.start()
    assert trusted.waited.wait(10.0), "the worker did not wait for its standing"
    given_at = time.monotonic()
    trusted.set()
    worker.join(10.0)
    assert busy_since and busy_since[0] >= given_at


IDLE_FOR_S = 3600.0
"""The worker's idle wait in the test: a wake that came only when it ended never comes."""


def test_an_idle_worker_sleeps_until_a_push_or_a_stop_wakes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With nothing pushed the worker waits long (an idle subscriber costs no CPU), and a
    push, then a stop, wake it: neither waits for the wait to end."""
    monkeypatch.setattr(client, "WORKER_IDLE_WAIT_S", IDLE_FOR_S)
    handled = threading.Event()
    sub = Subscriber("c", "s1", lambda ev: handled.set())
    waits: list[float] = []
    take_all = sub._inbox.take_all

    def watched(timeout_s: float) -> Any:
        waits.append(timeout_s)
        return take_all(timeout_s)

    sub._inbox.take_all = watched  # type: ignore[method-assign]
    worker = threading.Thread(target=sub._work)
    worker.start()
    try:
        sub._take_in({"session": 1, "seq": 1, "events": [event("a")]})
        assert handled.wait(30.0), "the push did not wake the worker"
    finally:
        sub.stop()
        worker.join(30.0)
    assert not worker.is_alive(), "the stop did not wake the worker"
    assert waits and set(waits) == {IDLE_FOR_S}


class Standing:
    """The control thread's side, as the worker sees it: trusted until distrusted."""

    def __init__(self) -> None:
        self.trusted = threading.Event()
        self.trusted.set()
        self.confirmed = threading.Event()
        """Our standing confirmed lately (ChannelSession.fresh)."""
        self.confirmed.set()
        self.distrusted = threading.Event()

    def fresh(self) -> bool:
        return self.confirmed.is_set()

    def distrust(self) -> None:
        self.trusted.clear()
        self.distrusted.set()


def test_after_a_gap_while_events_were_held_no_event_starts_before_a_standing_check() -> None:
    """No thread of the process ran for longer than FREEZE_GAP_S (a freeze) while events
    waited: the channel may have handed them on, so the worker starts none of them until
    the control thread confirms our standing. After an idle gap it goes on at once."""
    ran: list[str] = []
    sub = Subscriber("c", "s1", lambda ev: ran.append(ev["id"]))
    standing = Standing()
    sub._session = standing  # type: ignore[assignment]
    sub._take_in({"session": 1, "seq": 1, "events": [event("a")]})
    sub._ran_at -= client.FREEZE_GAP_S + 0.1  # frozen with "a" queued
    sub._read_request("a push")  # a push read after the freeze sees the gap first
    assert not standing.trusted.is_set()
    idle = Subscriber("c", "s2", lambda ev: ran.append(ev["id"]))
    idle._session = Standing()  # type: ignore[assignment]
    idle._ran_at -= client.FREEZE_GAP_S + 0.1  # idle that long: nothing was held
    idle._take_in({"session": 1, "seq": 1, "events": [event("b")]})
    idle._handle(idle._inbox.take_all(0.0))
    assert ran == ["b"]


def test_what_a_chunk_finished_goes_on_while_a_long_handler_runs() -> None:
    """An instant event's ack waited for the next event's 20 s job in the same push: its
    partition stalled, and a crash meanwhile had it run again elsewhere (session 33's
    Jepsen probe). The control thread takes it once the handler has run ACK_LINGER_S."""
    release = threading.Event()
    started = threading.Event()

    def handler(ev: dict[str, Any]) -> None:
        if ev["id"] == "b":
            started.set()
            assert release.wait(30.0)

    sub = Subscriber("c", "s1", handler)
    sub._take_in({"session": 1, "seq": 1, "events": [event("a"), event("b", partition=1)]})
    worker = threading.Thread(target=sub._handle, args=(sub._inbox.take_all(0.0),))
    worker.start()
    try:
        assert started.wait(30.0)
        wait_until(lambda: sub._stuck_s() >= client.ACK_LINGER_S, what="the long handler")
        sub._release_held()
        assert [o.uid for o in sub._outbox._pending] == ["P/a"]  # b still runs
        assert sub._processed.known(["P/a"]) == {"P/a"}  # in the window before its ack
        sub._release_held()  # nothing new: nothing sent twice
        assert [o.uid for o in sub._outbox._pending] == ["P/a"]
    finally:
        release.set()
        worker.join(30.0)
    assert [o.uid for o in sub._outbox._pending] == ["P/a", "P/b"]


def test_no_event_starts_while_our_standing_is_not_confirmed_lately() -> None:
    """A push read on a link slower than the channel's ack timeout ran after the channel
    had handed its events to another subscriber (session 36's network probe): no call
    confirmed our standing for half that timeout, so the worker asks first, and a
    confirmation by a call sent too long ago (trusted again, still not fresh) is not
    enough."""
    ran: list[str] = []
    sub = Subscriber("c", "s1", lambda ev: ran.append(ev["id"]))
    standing = Standing()
    standing.confirmed.clear()  # the last confirmation is older than the fence
    sub._session = standing  # type: ignore[assignment]
    sub._take_in({"session": 1, "seq": 1, "events": [event("a")]})
    worker = threading.Thread(target=sub._handle, args=(sub._inbox.take_all(0.0),))
    worker.start()
    try:
        assert standing.distrusted.wait(10.0), "the worker did not ask for its standing"
        standing.distrusted.clear()
        standing.trusted.set()  # answered, but by a call sent too long ago
        assert standing.distrusted.wait(10.0), "a stale confirmation was taken"
        assert ran == []
        standing.confirmed.set()
        standing.trusted.set()
    finally:
        worker.join(10.0)
    assert ran == ["a"]
