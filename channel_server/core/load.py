"""How busy this process is on its CPU: whether pushes should trade latency for size (pure).

A broker whose CPU is the bottleneck spends most of it on the fixed cost of each push and
its ack (round trips, thread wake-ups: about 1.5 ms of CPU between the broker and the
subscriber, against tens of µs per event). Fuller pushes then raise what it can deliver,
and the latency a wait adds is small beside the queueing the saturation already causes. A
broker that is not busy gains nothing from waiting, so the wait is only taken while it
is: the share of one core this process used over the last window.
"""

from __future__ import annotations

from collections.abc import Callable

WINDOW_S = 1.0
"""The load is measured over windows of about this long."""


class CpuLoad:
    """The CPU seconds a process spent per second of wall time, over its last window."""

    __slots__ = ("_start", "share")

    def __init__(self) -> None:
        self.share = 0.0
        """CPU seconds per second over the last full window (1.0: one core all the time;
        a multi-threaded process can exceed it)."""
        self._start: tuple[float, float] | None = None
        """The current window's start: (wall time, CPU seconds)."""

    def observe(self, now: float, cpu: Callable[[], float]) -> None:
        """Called often (at each publish): closes the window once it is ``WINDOW_S``
        long. ``cpu`` (the process's CPU seconds) is read only then, so the observation
        costs nothing most of the time. A window after a long idle spell is long and
        shows the idleness."""
        if self._start is None:
            self._start = (now, cpu())
            return
        started, used = self._start
        if now - started < WINDOW_S:
            if now < started:  # the wall clock stepped back: start again
                self._start = (now, cpu())
            return
        spent = cpu()
        self.share = max(0.0, spent - used) / (now - started)
        self._start = (now, spent)

    def busy(self, threshold: float) -> bool:
        """Whether the last window's share reached ``threshold`` (0 or less: never)."""
        return threshold > 0 and self.share >= threshold
