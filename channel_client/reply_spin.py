"""Waiting for a quick reply awake: a short spin before the blocking read, where it pays.

A caller blocked in ``recv`` sleeps, and the reply has to wake it. Where an idle CPU halts
(a VM without guest halt polling, as this project's benchmark machines are), that wake
costs tens of µs on both sides: two threads handing a turn back and forth across CPUs took
110 µs a round there, against 14 on one CPU and 21 with halt polling on. A one-event
publish pays it on every call.

A connection made here, after sending a request, may poll its socket without blocking for
about as long as its replies take (SPIN_FACTOR times the typical round trip, at most the
caller's ``max_s``), and block only then: the reply finds it running, and the sender's
write wakes nobody. Whether it does is learnt from its own round trips
(:class:`SpinPolicy`): it spins while replies take less than ``max_s`` and the quickest of
those waited for awake come back MIN_GAIN quicker than the quickest waited for asleep; one
call in PROBE_EVERY waits the other way, so a change is seen. Where waking is cheap, or
replies are slow (large batches, a busy broker), it sleeps as any client does. One thread
of a process spins at a time (the others sleep), and the GIL is let go at every look.
"""

from __future__ import annotations

import select
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import Pyro5.client
from Pyro5 import socketutil

CALLER_SPIN_S = 0.0005
"""The longest a caller's own thread, which has nothing to do but wait, waits for a reply
awake: ``Publisher.publish`` and ``PullClient.get`` (a one-event publish or a get takes a
few hundred µs here). Threads whose waits overlap other work (``submit``'s sender, a push
subscriber's control thread, the broker) do not spin."""
SPIN_FACTOR = 2.0
"""A spin lasts up to this many times the typical round trip: most replies come within."""
WINDOW = 31
"""The latest round trips of each kind that are looked at."""
FAST_SHARE = 8
"""The gain is judged on the quickest eighth of each kind's round trips: what waking
costs shows there, while the broker's own pauses (a store's write, a push) spread the
rest (on this project's VMs, the medians of both kinds overlap, their quickest do not)."""
MIN_GAIN = 0.15
"""Spin only while the quick replies waited for asleep take this much longer than those
waited for awake: about half again as long for a one-event publish on this project's VMs,
no longer with guest halt polling on. Measured with this bound, a one-event publisher spun
on 90 % of its calls on those VMs and on 12-19 % with halt polling on (the probes, and the
quick ends' noise)."""
PROBE_EVERY = 16
"""One call in this many waits the way the policy does not choose, to keep both kinds
current."""


@dataclass(frozen=True)
class RoundTrips:
    """What the latest round trips of one kind took: their quick end and their median."""

    quick_s: float
    typical_s: float

    @classmethod
    def of(cls, seen: deque[float]) -> RoundTrips:
        ordered = sorted(seen)
        return cls(ordered[len(ordered) // FAST_SHARE], ordered[len(ordered) // 2])


@dataclass
class SpinPolicy:
    """How long the next reply is waited for awake (0: asleep), from the round trips seen."""

    max_s: float
    awake: RoundTrips | None = None
    """Replies waited for awake (the spin included)."""
    asleep: RoundTrips | None = None
    """Replies waited for asleep from the start."""
    calls: int = 0
    _seen: tuple[deque[float], deque[float]] = field(
        default_factory=lambda: (deque(maxlen=WINDOW), deque(maxlen=WINDOW)), repr=False
    )

    def budget(self) -> float:
        """Seconds to spin before blocking on the next reply: none while replies take
        ``max_s`` or more (no probes either: every reply measures that)."""
        self.calls += 1
        awake, asleep = self.awake, self.asleep
        if asleep is None or not self._quick():
            return 0.0
        if awake is None:
            return self.max_s  # what waiting awake takes is measured next
        spin = asleep.quick_s >= awake.quick_s * (1 + MIN_GAIN)
        if self.calls % PROBE_EVERY == 0:
            spin = not spin
        return min(self.max_s, SPIN_FACTOR * awake.typical_s) if spin else 0.0

    def _quick(self) -> bool:
        """Whether replies typically take less than ``max_s``, waited for either way."""
        known = [trips.typical_s for trips in (self.awake, self.asleep) if trips is not None]
        return min(known) < self.max_s

    def record(self, round_trip_s: float, spun: bool) -> None:
        seen = self._seen[spun]
        seen.append(round_trip_s)
        if spun:
            self.awake = RoundTrips.of(seen)
        else:
            self.asleep = RoundTrips.of(seen)


class SpinningConnection(socketutil.SocketConnection):
    """A Pyro5 client connection whose first read after a send may spin (see the module)."""

    policy: SpinPolicy | None = None
    """Set by :func:`spin_for_replies` (None: never spins)."""
    _sent_at: float | None = None
    _poller: Any = None

    def send(self, data: bytes) -> None:
        super().send(data)
        self._sent_at = time.perf_counter()

    def recv(self, size: int) -> bytes:
        sent_at, self._sent_at = self._sent_at, None
        policy = self.policy
        if sent_at is None or policy is None:  # (None: the rest of a reply begun)
            return super().recv(size)
        budget = policy.budget()
        spun = budget > 0 and self._spin(sent_at + budget)
        data = super().recv(size)
        policy.record(time.perf_counter() - sent_at, spun)
        return data

    def _spin(self, deadline: float) -> bool:
        """Poll until the reply is readable or ``deadline`` passed (each poll lets the GIL
        go); False when another thread spins already (this one sleeps then). TLS bytes
        already decrypted need no poll."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        if not _SPINNER.acquire(blocking=False):
            return False
        try:
            if self._poller is None:
                self._poller = select.poll()
                self._poller.register(self.sock, select.POLLIN)
            poll = self._poller.poll
            while not poll(0) and time.perf_counter() < deadline:
                pass
        finally:
            _SPINNER.release()
        return True


_SPINNER = threading.Lock()
"""Held by the thread spinning: one at a time per process, so threads publishing at once
do not spend a CPU each, nor pass the GIL around among themselves."""


def spin_for_replies(proxy: Pyro5.client.Proxy, max_s: float) -> None:
    """Let the proxy's connection (once it has one) wait for replies as above. Pyro5
    makes its connection itself, as a plain ``SocketConnection``; that class is swapped
    for the subclass (no state of its own is lost: the subclass only adds some). Where
    ``select.poll`` is missing (Windows) nothing spins."""
    conn: Any = getattr(proxy, "_pyroConnection", None)  # None until it connects
    if max_s > 0 and type(conn) is socketutil.SocketConnection and hasattr(select, "poll"):
        conn.__class__ = SpinningConnection
        conn.policy = SpinPolicy(max_s)
