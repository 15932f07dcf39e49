"""The subscriber's two queues: events pushed and not yet handled, outcomes not yet sent.

A push only hands events over (the reply says how many were queued), the worker thread
runs the handler on them in delivery order, and the control thread sends the outcomes back
as acks. When the channel's push offers a wait (``answer_s``), the thread that took the
push in waits that long for the worker and puts the acks in its reply instead, while the
control thread holds back. Both queues are thread-safe; each has one ``_cond`` guarding
all its state.

An ack message covers the seqs from the end of the session's previous message through its
last outcome: an event of that range it names neither way was skipped (the channel
redelivers it). The ranges of one session never overlap, so a reply's acks and the control
thread's may reach the channel in either order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from itertools import groupby
from typing import Any

import msgspec

log = logging.getLogger(__name__)
ACK_BATCH_MAX = 500
"""Outcomes sent at once at most (well below the channel's limit per message)."""
ACK_LINGER_S = 0.005
"""While the worker is busy, outcomes wait at most this long to be sent together."""
ANSWER_WAIT_MAX_S = 0.05
"""The longest a push's thread waits for the worker, whatever the channel offers: each
push holds one of the channel's push threads while it waits."""


class Item(msgspec.Struct, frozen=True, gc=False):
    """One pushed event in the inbox (a struct: one is built per event, 10x cheaper than
    a frozen dataclass)."""

    session: int
    seq: int
    event: dict[str, Any]


class StaleSession(Exception):
    """A push of a session older than the current one (a broker that died, a session
    that ended): refused, its events belong to nobody here."""


class Inbox:
    """Events of the current session in delivery order. A push of a newer session (the
    subscriber was resubscribed or the broker restored it) drops what is left of the old
    one: the channel took those events back and hands them out again. Sessions only move
    forward (each life of a channel starts past the last one): a late push of an older
    session is refused, so it cannot drop the current session's events."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: deque[Item] = deque()
        self.session: int | None = None
        self.ended: int | None = None
        """A session the channel said is over while no newer one was adopted: none of its
        events may be handled (the channel handed them to another member)."""
        self._closed = False

    def put(self, session: int, seq: int, events: list[dict[str, Any]]) -> int:
        """Queue a push's events; raises StaleSession for an older or ended session's push."""
        with self._cond:
            if self.session is not None and session < self.session:
                raise StaleSession(f"session {session} is older than {self.session}")
            if session == self.ended:
                raise StaleSession(f"session {session} is over")
            self._switch(session)
            self._items.extend(Item(session, seq + i, ev) for i, ev in enumerate(events))
            self._cond.notify()
        return len(events)

    def adopt(self, session: int) -> None:
        """The channel says this is the current session (a subscribe or heartbeat); an
        older one than the inbox has seen is ignored (a late answer)."""
        with self._cond:
            if self.session is None or session > self.session:
                self._switch(session)

    def end(self, session: int) -> None:
        """The channel says ``session`` is over (its id taken from elsewhere, or declared
        dead) and no new one could be had yet: its queued events are dropped, and a late
        push of it is refused."""
        with self._cond:
            if self.session is not None and session < self.session:
                return  # a newer one is current already
            self._switch(session)
            if self._items:
                log.info("session %s is over: %d queued events dropped", session, len(self._items))
                self._items.clear()
            self.ended = session

    def current(self, session: int) -> bool:
        """Whether events of ``session`` may be handled: it is the inbox's, and not over
        (read without the lock: the worker asks before each event)."""
        return session == self.session and session != self.ended

    def count(self, session: int) -> int:
        """Events of ``session`` waiting for the worker."""
        with self._cond:
            return len(self._items) if session == self.session else 0

    def _switch(self, session: int) -> None:
        if session != self.session:
            if self._items:
                log.info(
                    "session %s is over: %d queued events dropped", self.session, len(self._items)
                )
            self._items.clear()
            self.session = session

    def take_all(self, timeout_s: float) -> list[Item]:
        """Everything queued now (waiting up to ``timeout_s`` for something). The caller
        checks each item's session against ``session`` before it: a new session may drop
        the rest."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout_s)
            if self._closed:
                return []
            items = list(self._items)
            self._items.clear()
            return items

    def empty(self) -> bool:
        with self._cond:
            return not self._items

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class Outcome(msgspec.Struct, frozen=True, gc=False):
    """What became of one event, waiting in the outbox to be sent."""

    session: int
    seq: int
    uid: str
    """The event's uid (``publisher_id/id``): what acks name."""
    error: str | None = None
    """None: processed (or processed before); a string: the handler failed (a nack)."""
    dropped: bool = False
    """Processed, but left out of the ack (the drop-acks fault: a lost ack)."""
    returned: bool = False
    """Not handled: an earlier event of its partition failed in the same push, and the
    channel delivers this one again after that one (a partition is processed in order)."""


class AckMessage(msgspec.Struct, frozen=True, gc=False):
    """One ack message: what became of a session's events from ``from_seq`` through
    ``through_seq`` (None: from the session's first, for a channel that offers no answers
    and takes the message without it)."""

    session: int
    from_seq: int | None
    through_seq: int
    acked: list[str]
    nacked: dict[str, str]
    returned: list[str] = []
    """Events given back unhandled (:attr:`Outcome.returned`); sent only when some are,
    so a channel of a version before them reads every other message."""

    @property
    def size(self) -> int:
        """The events it names."""
        return len(self.acked) + len(self.nacked) + len(self.returned)

    def as_answer(self) -> dict[str, Any]:
        """The message as a push's reply carries it."""
        answer = {
            "from_seq": self.from_seq or 0,
            "through_seq": self.through_seq,
            "acked": self.acked,
            "nacked": self.nacked,
        }
        if self.returned:
            answer["returned"] = self.returned
        return answer


class Outbox:
    """Outcomes waiting to be sent, collected so that one ack message covers many."""

    def __init__(self) -> None:
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        """The control thread waits on it (all the state below is guarded by ``lock``)."""
        self._answerable = threading.Condition(lock)
        """A push's thread answering waits on it: outcomes it may take woke it, and the
        control thread sleeps on (a wake-up costs some 30 µs of CPU on a busy box)."""
        self._pending: list[Outcome] = []
        self._oldest = 0.0
        self._urgent = False
        self._interrupted = False
        self._answering = 0
        """Threads waiting to answer a push with acks: the control thread takes none then."""
        self._offered: int | None = None
        """The session whose pushes offered answers: each of its messages says where its
        range starts (the broker of another session may be older, and take no such say)."""
        self._covered = (-1, -1)
        """The newest session an ack message covered, and the last seq it covered."""
        self._unanswered: list[AckMessage] = []
        """Messages taken for a push's reply that the channel stopped waiting for: the
        control thread sends them instead (next, before any other)."""

    def add(self, outcomes: list[Outcome], urgent: bool) -> None:
        """``urgent``: the worker has nothing more to do now (or held these long enough),
        so send them at once."""
        with self._cond:
            if not self._pending:
                self._oldest = time.monotonic()
            self._pending.extend(outcomes)
            self._urgent = self._urgent or urgent
            if self._answering:
                self._answerable.notify_all()
            else:
                self._cond.notify()

    def answer(self, session: int, last_seq: int, timeout_s: float) -> AckMessage | None:
        """For the thread of a push whose events end at ``last_seq``: wait up to
        ``timeout_s`` (at most ANSWER_WAIT_MAX_S) for the worker to finish them, then take
        what is done as one message, if all of it is of ``session``; else None, and the
        control thread sends it."""
        deadline = time.monotonic() + min(timeout_s, ANSWER_WAIT_MAX_S)
        with self._cond:
            self._offered = session
            self._answering += 1
            try:
                while not self._done_through(session, last_seq) and not self._interrupted:
                    if (left := deadline - time.monotonic()) <= 0:
                        break
                    self._answerable.wait(left)
                if not self._pending or any(o.session != session for o in self._pending):
                    return None
                return self._take()[0]
            finally:
                self._answering -= 1
                if self._pending:
                    self._cond.notify()  # the control thread sends what is left

    def unanswered(self, message: AckMessage) -> None:
        """A message taken by :meth:`answer` whose push the channel gave up on (its reply
        would be lost, and with it the acks): the control thread sends it at once. The
        channel still takes them: the events went back held for this subscriber."""
        with self._cond:
            self._unanswered.append(message)
            self._cond.notify()

    def _done_through(self, session: int, last_seq: int) -> bool:
        """Whether the outcomes through ``last_seq`` are in, or were sent already (the
        control thread took them before this push's thread began to wait)."""
        if self._covered[0] == session and self._covered[1] >= last_seq:
            return True
        last = self._pending[-1] if self._pending else None
        return last is not None and last.session == session and last.seq >= last_seq

    def wait(self, timeout_s: float) -> list[AckMessage]:
        """The ack messages due to be sent (urgent, many, or lingered long enough); []
        after ``timeout_s`` with none due."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if self._unanswered:
                    return self._take_unanswered()
                now = time.monotonic()
                if (
                    self._pending
                    and not self._answering
                    and (
                        self._urgent
                        or len(self._pending) >= ACK_BATCH_MAX
                        or now - self._oldest >= ACK_LINGER_S
                    )
                ):
                    return self._take()
                if now >= deadline or self._interrupted:
                    self._interrupted = False
                    return []
                wait = deadline - now
                if self._pending and not self._answering:  # else the answer's end wakes it
                    wait = min(wait, self._oldest + ACK_LINGER_S - now)
                self._cond.wait(max(wait, 0.0))

    def count(self, session: int) -> int:
        """Outcomes of ``session`` not sent yet."""
        with self._cond:
            resent = sum(m.size for m in self._unanswered if m.session == session)
            return resent + sum(1 for o in self._pending if o.session == session)

    def interrupt(self) -> None:
        """Make the current (or next) ``wait`` return at once."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()
            self._answerable.notify_all()

    def drain(self) -> list[AckMessage]:
        with self._cond:
            return self._take_unanswered() if self._unanswered else self._take()

    def _take_unanswered(self) -> list[AckMessage]:
        messages, self._unanswered = self._unanswered, []
        return messages

    def _take(self) -> list[AckMessage]:
        """Up to ACK_BATCH_MAX outcomes, as one message per session, each covering its
        session's seqs from where the previous message ended."""
        taken, self._pending = self._pending[:ACK_BATCH_MAX], self._pending[ACK_BATCH_MAX:]
        self._urgent = bool(self._pending) and self._urgent
        if self._pending:
            self._oldest = time.monotonic()
        return [self._message(list(run)) for _, run in groupby(taken, key=_session_of)]

    def _message(self, done: list[Outcome]) -> AckMessage:
        session, through = done[0].session, max(o.seq for o in done)
        newest, covered = self._covered
        if session >= newest:  # an older session's late outcomes: its broker is gone
            self._covered = (session, through)
        start = covered + 1 if session == newest else 0
        return AckMessage(
            session,
            start if session == self._offered else None,
            through,
            [o.uid for o in done if o.error is None and not (o.dropped or o.returned)],
            {o.uid: o.error for o in done if o.error is not None},
            [o.uid for o in done if o.returned],
        )


def _session_of(outcome: Outcome) -> int:
    return outcome.session
