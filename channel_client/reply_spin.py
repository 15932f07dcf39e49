"""Waiting for a quick reply awake: a short spin before the blocking read.

A caller blocked in ``recv`` sleeps, and the broker's reply must wake it. Where an idle CPU
halts (a VM without guest halt polling, as this project's benchmark machines are), that
wake costs tens of µs on both sides: two threads handing a turn back and forth across CPUs
took 110 µs a round, against 14 on one CPU. A one-event publish pays it on every call.

A connection made here, after sending a request, polls its socket without blocking for
about as long as its recent replies took (SPIN_FACTOR times the smoothed round trip, at most
the caller's ``max_s``) and only then blocks: the reply usually finds it running. A caller
whose replies take longer than ``max_s`` (large batches, a busy broker) never spins, so
the CPU it would burn is spent only where the wait is short; the GIL is let go at every
look. Measured on batch-1 publishes (``bench.py --only batch1``): 1.3-1.4x the events/s,
and the broker's CPU per event down by a quarter (its reply no longer wakes anybody).
"""

from __future__ import annotations

import select
import time
from typing import Any

import Pyro5.client
from Pyro5 import socketutil

SPIN_FACTOR = 2.0
"""A spin lasts up to this many times the smoothed round trip: most replies come within."""
SMOOTHING = 0.2
"""Weight of the latest round trip in the smoothed one."""


def spin_budget(smoothed_s: float | None, max_s: float) -> float:
    """How long to poll for the next reply: none when replies take ``max_s`` or more,
    ``max_s`` before the first reply, else SPIN_FACTOR times the smoothed round trip."""
    if smoothed_s is None:
        return max_s
    if smoothed_s >= max_s:
        return 0.0
    return min(max_s, SPIN_FACTOR * smoothed_s)


def smoothed(previous_s: float | None, latest_s: float) -> float:
    return latest_s if previous_s is None else previous_s + SMOOTHING * (latest_s - previous_s)


class SpinningConnection(socketutil.SocketConnection):
    """A Pyro5 client connection whose first read after a send spins (see the module)."""

    max_s: float = 0.0
    _sent_at: float | None = None
    _round_trip_s: float | None = None
    _poller: Any = None

    def send(self, data: bytes) -> None:
        super().send(data)
        self._sent_at = time.perf_counter()

    def recv(self, size: int) -> bytes:
        sent_at, self._sent_at = self._sent_at, None
        if sent_at is None:  # the rest of a reply whose first bytes were read
            return super().recv(size)
        self._spin(sent_at + spin_budget(self._round_trip_s, self.max_s))
        data = super().recv(size)
        self._round_trip_s = smoothed(self._round_trip_s, time.perf_counter() - sent_at)
        return data

    def _spin(self, deadline: float) -> None:
        """Poll until the reply is readable or ``deadline`` passed (each poll lets the GIL
        go). TLS bytes already decrypted need no poll."""
        if time.perf_counter() >= deadline or getattr(self.sock, "pending", _none)():
            return
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self.sock, select.POLLIN)
        poll = self._poller.poll
        while not poll(0) and time.perf_counter() < deadline:
            pass


def _none() -> int:
    return 0


def spin_for_replies(proxy: Pyro5.client.Proxy, max_s: float) -> None:
    """Make the proxy's connection (once it has one) wait for replies as above. Pyro5
    makes its connection itself, as a plain ``SocketConnection``; that class is swapped
    for the subclass (no state of its own is lost: the subclass only adds some)."""
    conn: Any = getattr(proxy, "_pyroConnection", None)  # None until it connects
    if max_s > 0 and type(conn) is socketutil.SocketConnection:
        conn.__class__ = SpinningConnection
        conn.max_s = max_s
