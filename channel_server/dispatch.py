"""The broker's dispatch pool, and the link to one push member's callback.

A push only hands a batch over (the subscriber acknowledges events in its reply when its
handlers finish within the wait the push offers, a few ms, else later), so pushes are
short and a small, bounded pool of threads serves every push member
of every channel: a thousand subscribers do not need a thousand threads. The same pool runs
delayed work (a retry after a back-off, a lingering batch, the housekeeping round) and the
liveness pings. A task that raises is logged and the worker goes on: no thread dies with a
member's work in its hands.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import Pyro5.api
import Pyro5.serializers

from channel_server.core.member import Batch
from channel_server.errors import InvalidArgument
from channel_server.guard import callback_proxy
from channel_server.wire import SERIALIZER, closed_by_peer

log = logging.getLogger(__name__)
Task = Callable[[], None]
IDLE_WAIT_S = 1.0
"""Longest a worker waits for work before looking again (every wait has a timeout)."""
STOP_TIMEOUT_S = 5.0
SLOW_TASK_S = 0.25
"""A task running longer than this is waiting for someone (a push to a frozen subscriber
waits up to its ack timeout), not competing for the CPU: a spare worker may start another.
A push answered in time takes a few ms; at 256 subscribers on 2 CPUs, tens."""


class DispatchPool:
    """A bounded set of worker threads running short tasks, now or after a delay.

    ``concurrency`` workers take every task; the other ``threads - concurrency`` are
    spares, which take a task that is due only while fewer than ``concurrency`` quick ones
    run, or when it is ``full``. Fewer short pushes at once make fuller ones (events
    gather for a member while its push waits for a thread), while a full push gains
    nothing by waiting; and a push to a frozen subscriber holds its thread until the ack
    timeout: a spare takes over then, and ``threads`` frozen at once stall every push for
    that long.

    ``_cond`` (with its lock) guards ``_due`` (a heap of (due time, sequence, full, task)),
    ``_timer``, ``_idle``, ``_started`` and ``_stopping``. Tasks run outside it. Callers
    may hold their own locks while submitting: the pool never calls out while holding it.
    """

    def __init__(
        self,
        threads: int,
        name: str = "dispatch",
        concurrency: int | None = None,
        slow_s: float = SLOW_TASK_S,
    ) -> None:
        """``concurrency``: the workers that take every task (None: all ``threads``)."""
        # The pool's lock, with two conditions: _cond, which the workers wait on, and
        #   _spares, which the spares wait on (with a timeout; submit wakes one for a full
        #   task when no worker is idle). Guards _due, _timer, _idle, _started and
        #   _stopping. A leaf: taken under a channel lock by submit, never held while a
        #   task runs or while anything else is called.
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._spares = threading.Condition(lock)
        self._due: list[tuple[float, int, bool, Task]] = []
        self._order = itertools.count()
        self._stopping = False
        self._timer: float | None = None
        """When the worker waiting for the earliest delayed task wakes (None: no such
        worker)."""
        self._concurrency = min(threads, concurrency or threads)
        self._slow_s = slow_s
        self._started: dict[int, float] = {}
        """When each thread running a task started it, or its latest part (by ident)."""
        self._idle = 0
        """Workers (not spares) waiting for work."""
        self._threads = [
            threading.Thread(
                target=self._work, args=(n >= self._concurrency,), name=f"{name}-{n}", daemon=True
            )
            for n in range(threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, task: Task, delay_s: float = 0.0, full: bool = False) -> None:
        """Run ``task`` in ``delay_s``; ``full``: it gains nothing by waiting for a turn (a
        full push), so a spare may take it. A task due no sooner than what the timer
        worker waits for wakes nobody: the timer looks again when it wakes (a push
        lingering after each answered push made a wasted wake-up of an idle worker, 8 %
        of the broker's GIL samples in the default workload)."""
        due = time.monotonic() + max(0.0, delay_s)
        with self._cond:
            if self._stopping:
                return
            heapq.heappush(self._due, (due, next(self._order), full, task))
            if delay_s > 0 and self._timer is not None and due >= self._timer:
                return
            if full and delay_s <= 0 and not self._idle:
                self._spares.notify()  # every worker is busy: a spare takes it now
            else:
                self._cond.notify()

    def carry_on(self) -> bool:
        """For a task that could go on with more work of its own (the next push to the
        same member): False when another task is due (it hands its work back to the pool
        then, for fairness); else True, and its clock starts again: a run of quick pushes
        is not one slow task."""
        now = time.monotonic()
        with self._cond:
            if self._is_due(now):
                return False
            if (me := threading.get_ident()) in self._started:
                self._started[me] = now
            return True

    def stop(self) -> None:
        """Stop taking tasks; workers finish the task in hand and end."""
        with self._cond:
            self._stopping = True
            self._due.clear()
            self._cond.notify_all()
            self._spares.notify_all()
        for thread in self._threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(STOP_TIMEOUT_S)

    def _is_due(self, now: float) -> bool:
        return bool(self._due) and self._due[0][0] <= now

    def _next(self, spare: bool) -> Task | None:
        me = threading.get_ident()
        with self._cond:
            self._started.pop(me, None)  # its task before is done
            while not self._stopping:
                now = time.monotonic()
                if self._is_due(now) and self._may_take(spare, now):
                    task = heapq.heappop(self._due)[3]
                    self._started[me] = now
                    if self._due and (self._due[0][0] <= now or self._timer is None):
                        self._cond.notify()  # more is due, or nobody waits for what is next
                    return task
                if spare:
                    self._spares.wait(self._slow_s)
                else:
                    self._wait(now)
            return None

    def _may_take(self, spare: bool, now: float) -> bool:
        """Whether the task due first may start on this thread: on a worker always; on a
        spare when it is full or fewer than ``concurrency`` quick tasks run."""
        return not spare or self._due[0][2] or self._quick(now) < self._concurrency

    def _quick(self, now: float) -> int:
        """Tasks running that started (or started their latest part) within SLOW_TASK_S."""
        return sum(1 for at in self._started.values() if now - at < self._slow_s)

    def _wait(self, now: float) -> None:
        """Wait for work. One worker (the timer) waits until the earliest delayed task is
        due; the rest wait to be notified, so a delayed task wakes one thread, not all."""
        head = self._due[0][0] if self._due else None
        self._idle += 1
        try:
            if head is None or (self._timer is not None and self._timer <= head):
                self._cond.wait(IDLE_WAIT_S)
                return
            self._timer = head
            try:
                self._cond.wait(min(head - now, IDLE_WAIT_S))
            finally:
                if self._timer == head:
                    self._timer = None
        finally:
            self._idle -= 1

    def _work(self, spare: bool) -> None:
        while (task := self._next(spare)) is not None:
            try:
                task()
            except Exception:
                log.exception("dispatch task %r failed", task)


class NotSent(ConnectionError):
    """A push failed before it went out (no connection, a failed ping, a busy or
    aborted link): the member cannot have received it."""


class MemberLink:
    """The broker's connection to one push member's callback object.

    One proxy per member, used by one pool thread at a time: ``_lock`` guards ``_proxy``,
    ``_failed`` and ``_packed``; the thread holding it claims the proxy (Pyro5 proxies
    belong to a thread). After a failed push the next one pings first with the short
    liveness timeout, so a frozen subscriber costs one ack timeout and then a ping per
    retry, not a timeout each.
    """

    def __init__(
        self,
        callback: str,
        secret: str,
        push_timeout_s: float,
        ping_timeout_s: float,
        answer_wait_s: float = 0.0,
    ) -> None:
        """``answer_wait_s``: how long each push offers the subscriber to finish its
        events and put their acks in the reply (0: no offer)."""
        self.callback = callback
        self.secret = secret
        """Presented to the callback daemon, which admits only this channel."""
        self._push_timeout_s = push_timeout_s
        self._ping_timeout_s = ping_timeout_s
        self._offer = {"answer_s": float(answer_wait_s)} if answer_wait_s > 0 else {}
        # The link's lock. Guards _proxy, _failed and _packed; held over the push or ping
        #   RPC (one pool thread uses the proxy at a time) and taken with a timeout. Taken
        #   by a pool thread holding no other lock, and never held while taking the
        #   channel's.
        self._lock = threading.Lock()
        self._proxy: Pyro5.api.Proxy | None = None
        self._failed = False
        self._packed = True
        """Whether the subscriber takes packed pushes (False once it said it does not)."""
        self._aborted = False
        """Set once, by :meth:`abort` (any thread): the link pushes nothing more."""

    def push(self, batch: Batch) -> tuple[Any, float]:
        """Hand a batch over; returns the reply and the round trip in seconds. Raises on
        any failure (the caller counts it against the member); :class:`NotSent` when it
        failed before the push went out."""
        if not self._lock.acquire(timeout=self._push_timeout_s + self._ping_timeout_s):
            raise NotSent(f"link to {self.callback} busy")
        sending = False
        try:
            if self._failed and not self.answers():
                raise ConnectionError(f"{self.callback} does not answer a ping")
            if self._proxy is not None and closed_by_peer(self._proxy):
                self._drop()  # the subscriber closed it as idle: open a new one
            if self._proxy is None:
                self._proxy = callback_proxy(self.callback, self._push_timeout_s, self.secret)
            self._proxy._pyroClaimOwnership()
            if self._proxy._pyroConnection is None:
                self._proxy._pyroBind()  # connected here: an abort meanwhile sends nothing
            if self._aborted:
                raise ConnectionError(f"the session at {self.callback} is over")
            started = time.monotonic()
            sending = True
            reply = self._deliver(self._proxy, batch)
            self._failed = False
            return reply, time.monotonic() - started
        except Exception as exc:
            self._failed = True
            self._drop()
            if sending:
                raise
            raise NotSent(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._lock.release()

    def _deliver(self, proxy: Pyro5.api.Proxy, batch: Batch) -> Any:
        """Push the batch packed (``deliver_packed``), or in the plain form to a
        subscriber older than this broker: it has no such method (the proxy knows from
        the daemon's metadata, or the daemon says so), and that is found out once."""
        if self._packed and (packed := batch.to_wire_packed()) is not None:
            try:
                return proxy.deliver_packed(packed | self._offer)
            except (AttributeError, InvalidArgument) as exc:
                if isinstance(exc, InvalidArgument) and exc.argument != "method":
                    raise
                self._packed = False
                log.info("%s takes plain pushes only (an older subscriber)", self.callback)
        return proxy.deliver(batch.to_wire() | self._offer)

    def answers(self) -> bool:
        """Whether the member's callback answers a ping (on a connection of its own)."""
        return answers(self.callback, self._ping_timeout_s, self.secret)

    def abort(self) -> None:
        """Cut the connection of a push in progress now, from any thread, without its lock:
        the member's session ended (its id was taken from another address, or it left).
        A subscriber that reads the push later (it was frozen) finds the connection closed,
        so it knows the broker gave up on it and handles none of its events, which the
        new session gets. The pushing thread sees its push fail, for a session that is
        over (nothing is counted). Then :meth:`close` closes the link."""
        self._aborted = True  # a push still connecting sends nothing once connected
        proxy = self._proxy  # (a read without the lock: the push holds it)
        sock = getattr(getattr(proxy, "_pyroConnection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):  # closed already: nothing to cut
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._lock.acquire(timeout=self._push_timeout_s + self._ping_timeout_s):
            try:
                self._drop()
            finally:
                self._lock.release()

    def _drop(self) -> None:
        if self._proxy is not None:
            try:
                self._proxy._pyroClaimOwnership()
                self._proxy._pyroRelease()
            except Exception as exc:  # closing a broken connection: nothing more to do
                log.debug("closing the link to %s: %s", self.callback, exc)
            self._proxy = None


def answers(callback: str, timeout_s: float, secret: str) -> bool:
    """Whether a subscriber's callback object answers a ping within ``timeout_s``."""
    try:
        with callback_proxy(callback, timeout_s, secret) as proxy:
            proxy.ping()
    except Exception:
        return False
    return True


def wire_fault(message: Any) -> str | None:
    """Why ``message`` cannot cross the wire, or None: it is packed with the wire
    serializer and read back as a receiver reads it (a lone surrogate cannot be packed, an
    integer map key cannot be read back). Used to find the events at fault when a push
    fails, so they are dead-lettered instead of counting against the subscriber."""
    serializer = Pyro5.serializers.serializers[SERIALIZER]
    try:
        serializer.loads(serializer.dumps(message))
    except Exception as exc:  # whatever the serializer refuses: that is the answer
        return f"cannot be sent to subscribers ({SERIALIZER}): {type(exc).__name__}: {exc}"
    return None
