"""Publishing in the background (``Publisher.submit``): events one at a time, sent in batches.

A caller that has its events one at a time (a request handler, a loop over a file) pays a
whole round trip for each ``publish``. ``submit`` queues them instead and returns a
:class:`~concurrent.futures.Future`; one sender thread sends everything queued as one batch
whenever its previous send has come back. Nothing lingers: a lone event goes at once, and a
stream goes in batches as large as a round trip lets them grow. A future is done when the
channel has stored its events (or refused them), as ``publish`` returns then.

Submissions are sent in the order they were made, so each partition keeps its order:
- a send the channel refuses whole (an InvalidEvent, a message too large) is sent again one
  submission at a time, so only the submission that earned the refusal fails;
- a QueueFull is waited out (the channel's ``retry_after_s``) and the refused events are
  sent again before anything submitted later; once the publisher is closing, they fail with
  it instead.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from channel_server.errors import ClientError, InvalidEvent, QueueFull
from channel_server.log_throttle import Throttle
from channel_server.payloads import payload_size

log = logging.getLogger(__name__)
SEND_MAX_EVENTS = 1_000
"""Events one send carries at most: a submission larger than that goes alone, whole."""
SEND_MAX_BYTES = 8 << 20
"""Payload bytes one send carries at most (the same rule; a call holds 64 MiB at most)."""
PENDING_MAX_EVENTS = 100_000
PENDING_MAX_BYTES = 64 << 20
"""Events, and their payloads' bytes, submitted and not yet sent: ``submit`` waits for
room beyond either (the channel being full, or slower than the caller, holds the caller
back instead of its memory). A submission larger than that alone goes when none waits."""
WAIT_SLICE_S = 5.0
"""The longest the sender sleeps with nothing submitted: a submission or a close wakes it
(an idle publisher's thread costs no CPU)."""


@dataclass(eq=False)
class Submission:
    """Events submitted together, and what became of those sent so far."""

    events: list[dict[str, Any]]
    size: int = 0
    """Its payloads' bytes (``payload_size``)."""
    future: Future[dict[str, Any]] = field(default_factory=Future)
    accepted: int = 0
    unrouted: int = 0
    duplicates: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """What ``publish`` would have said of these events."""
        return {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "refused": 0,
            "unrouted": self.unrouted,
        }


def take_send(
    queue: deque[Submission], max_events: int = SEND_MAX_EVENTS, max_bytes: int = SEND_MAX_BYTES
) -> list[Submission]:
    """The next send: whole submissions from the front, ``max_events`` and ``max_bytes``
    at most (the first goes even when larger). A submission repeating an id of the send
    waits for the next one, so that each id the channel names in its reply belongs to one
    submission."""
    send: list[Submission] = []
    ids: set[str] = set()
    count = size = 0
    while queue:
        sub = queue[0]
        if send and (
            count + len(sub.events) > max_events
            or size + sub.size > max_bytes
            or any(ev["id"] in ids for ev in sub.events)
        ):
            break
        send.append(queue.popleft())
        ids.update(ev["id"] for ev in sub.events)
        count, size = count + len(sub.events), size + sub.size
    return send


def settle(
    send: list[Submission], duplicates: list[str], refused: set[str], unrouted: bool
) -> None:
    """Count a send's reply into its submissions: their duplicates, the events stored (or
    unrouted: a topic with no group), and the refused events, which stay to be sent again.
    Each id of a send belongs to one submission (``take_send``); a batch that repeats an
    id has its later copies counted as duplicates, and only its first copy refused."""
    owner = {ev["id"]: sub for sub in send for ev in sub.events}
    dups: dict[Submission, int] = {}
    for dup in duplicates:
        if (sub := owner.get(dup)) is not None:
            sub.duplicates.append(dup)
            dups[sub] = dups.get(sub, 0) + 1
    for sub in send:
        left: dict[str, dict[str, Any]] = {}
        for ev in sub.events:
            if ev["id"] in refused:
                left.setdefault(ev["id"], ev)
        fresh = len(sub.events) - dups.get(sub, 0) - len(left)
        if unrouted:
            sub.unrouted += fresh
        else:
            sub.accepted += fresh
        sub.events = list(left.values())


class SendPipeline:
    """The queue of submissions and the thread that sends them (started by the first
    ``submit``, stopped by ``close``). ``_cond`` guards ``_queue``, ``_queued`` and
    ``_queued_bytes`` (its events and their payloads' bytes), ``_sending`` (submissions
    taken and not done) and ``_closing``."""

    def __init__(
        self,
        publish: Callable[[list[dict[str, Any]]], dict[str, Any]],
        name: str,
        close_wait_s: float = 30.0,
    ):
        """``publish``: sends one batch (on a connection only the sender thread uses);
        ``close_wait_s``: how long a close at the interpreter's exit waits for the sends."""
        self._publish = publish
        self._name = name
        self._close_wait_s = close_wait_s
        self._cond = threading.Condition()
        self._queue: deque[Submission] = deque()
        self._queued = 0
        self._queued_bytes = 0
        self._sending = 0
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = Throttle(log)
        """Sends that failed: logged (at most every 10 s), so a caller that never looks
        at its futures still hears of events not stored."""

    def submit(
        self, events: list[dict[str, Any]], timeout_s: float | None
    ) -> Future[dict[str, Any]]:
        """Queue a batch; waits while PENDING_MAX_EVENTS (or _BYTES) wait (TimeoutError after
        ``timeout_s``; None: as long as it takes), but in a future's callback: the sender
        thread runs those, and only it makes room (a callback's submissions go past the
        bound, by at most one per future done). InvalidEvent at once for a batch that is
        not a list of maps with string ids (what the sender reads); the channel checks
        the rest."""
        shaped = _shaped(events)
        sub = Submission(shaped, sum(_payload_bytes(event) for event in shaped))
        on_sender = threading.current_thread() is self._thread
        with self._cond:
            if not on_sender and not self._cond.wait_for(self._has_room, timeout_s):
                raise TimeoutError(
                    f"{self._queued} events wait to be sent to a channel that does not take "
                    f"them (full, or away) after {timeout_s:g} s"
                )
            if self._closing.is_set():
                raise ValueError(f"{self._name} is closed")
            self._queue.append(sub)
            self._queued += len(sub.events)
            self._queued_bytes += sub.size
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
                atexit.register(self._at_exit)
        return sub.future

    def _at_exit(self) -> None:
        """A program that ends without closing its Publisher still sends what it
        submitted (the sender is a daemon thread: it would just stop)."""
        with self._cond:
            left = self._queued + self._sending
        if left:
            log.warning("%s: sending what was submitted before exiting (close() it)", self._name)
        self.close()

    def _has_room(self) -> bool:
        return (
            not self._queue
            or (self._queued < PENDING_MAX_EVENTS and self._queued_bytes < PENDING_MAX_BYTES)
            or self._closing.is_set()
        )

    def flush(self, timeout_s: float | None) -> bool:
        """Wait until everything submitted is done; False when ``timeout_s`` passed first
        (None: no limit; the sends' own retries and a full channel's waits bound it)."""
        self._not_on_sender("flush")
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._sending, timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is queued (a QueueFull is no longer waited out) and stop the thread,
        waiting ``timeout_s`` at most for it (None: ``close_wait_s``)."""
        self._not_on_sender("close")
        timeout_s = self._close_wait_s if timeout_s is None else timeout_s
        self._closing.set()
        with self._cond:
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            atexit.unregister(self._at_exit)
            thread.join(timeout_s)
            if thread.is_alive():
                log.warning("%s: sends still under way after %g s", self._name, timeout_s)

    def _not_on_sender(self, what: str) -> None:
        """A future's callbacks run on the sender thread, which would wait for itself."""
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                f"{what} cannot run in a future's callback (on the sender thread); "
                "hand it to another thread"
            )

    # -- the sender thread ---------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing.is_set():
                    self._cond.wait(WAIT_SLICE_S)
                taken = take_send(self._queue)
                if not taken:
                    return  # closing, and nothing left
                self._queued -= sum(len(sub.events) for sub in taken)
                self._queued_bytes -= sum(sub.size for sub in taken)
                # a submission cancelled before its send began is not sent
                send = [sub for sub in taken if sub.future.set_running_or_notify_cancel()]
                self._sending = len(send)
                self._cond.notify_all()  # room for submit
            try:
                self._send(send)
            finally:
                with self._cond:
                    self._sending = 0
                    self._cond.notify_all()

    def _send(self, send: list[Submission]) -> None:
        """Send until every submission of ``send`` is done."""
        while send:
            try:
                summary = self._publish([ev for sub in send for ev in sub.events])
            except QueueFull as full:
                settle(send, full.duplicates, set(full.refused_ids), unrouted=False)
                send = self._done_if_sent(send)
                if send and self._closing.wait(full.retry_after_s):  # closing: not again
                    self._fail(send, full, [_own_share(sub, full) for sub in send])
                    return
            except ClientError as exc:
                if len(send) == 1:
                    self._fail(send, exc)
                    return
                for sub in send:  # only the submission that earned it fails
                    self._send([sub])
                return
            except Exception as exc:  # the channel stays away (BrokerUnavailable ...)
                self._fail(send, exc)
                return
            else:
                settle(send, summary["duplicates"], set(), bool(summary.get("unrouted")))
                send = self._done_if_sent(send)

    def _fail(
        self,
        send: list[Submission],
        exc: BaseException,
        each: list[BaseException] | None = None,
    ) -> None:
        """Fail the submissions of ``send`` with ``exc`` (or each with its own error)."""
        events = sum(len(sub.events) for sub in send)
        self._failures.warning(
            "send",
            "%s: %d submitted events not stored: %s: %s (their futures hold the error)",
            self._name,
            events,
            type(exc).__name__,
            exc,
        )
        for sub, error in zip(send, each or [exc] * len(send), strict=True):
            sub.future.set_exception(error)

    @staticmethod
    def _done_if_sent(send: list[Submission]) -> list[Submission]:
        """Complete the submissions with nothing left to send; the others remain."""
        for sub in send:
            if not sub.events:
                sub.future.set_result(sub.summary())
        return [sub for sub in send if sub.events]


def _own_share(sub: Submission, full: QueueFull) -> QueueFull:
    """The QueueFull a submission left refused gets: its own counts, as ``publish`` of
    its events alone would have raised."""
    return QueueFull(
        full.channel,
        full.capacity,
        accepted=sub.accepted,
        refused_ids=[ev["id"] for ev in sub.events],
        duplicates=sub.duplicates,
        retry_after_s=full.retry_after_s,
        limit=full.limit,
    )


def _shaped(events: Any) -> list[dict[str, Any]]:
    """Copies of a submitted batch's events (a caller may reuse its dict for the next
    event before this one is sent), checked for what the sender reads."""
    if not isinstance(events, list | tuple):
        raise InvalidEvent("batch", f"must be a list of events, got {type(events).__name__}")
    for index, event in enumerate(events):
        if not isinstance(event, dict) or type(event.get("id")) is not str:
            raise InvalidEvent("id", "each event must be a map with a string id", index)
    return [dict(event) for event in events]


def _payload_bytes(event: dict[str, Any]) -> int:
    """What an event's payload counts for against the byte bounds (one the channel will
    refuse counts for nothing)."""
    try:
        return payload_size(event.get("payload"))
    except (TypeError, ValueError, OverflowError):
        return 0
