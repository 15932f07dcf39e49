"""How busy this process and its machine are on their CPUs: whether pushes should trade
latency for size (pure).

A broker whose CPU is the bottleneck spends most of it on the fixed cost of each push and
its ack (round trips, thread wake-ups: about 1.5 ms of CPU between the broker and the
subscriber, against tens of µs per event). Fuller pushes then raise what it can deliver,
and the latency a wait adds is small beside the queueing the saturation already causes. A
broker that is not busy gains nothing from waiting, so the wait is only taken while it
is: the share of one core this process used over the last window.

A broker sharing a saturated machine with its subscribers never reaches that share: with
64 subscribers on 2 cores it used 0.76 of a core while the machine's CPUs were 80 % in
use, and each push and ack cost both sides CPU the other lacked. So the broker is busy
too while the machine's CPUs are at least ``machine_threshold`` in use and it uses at
least :data:`SHARED_SHARE` of its own threshold: a large part of that load. A broker idle
on a machine busy with other work is not.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

WINDOW_S = 1.0
"""The load is measured over about this much of the recent past."""
STEP_S = 0.25
"""The CPU times are read at most this often: a broker turns busy within about this
long of a burst's start, instead of waiting for a whole window to close (a benchmark's
run or a job's flood of a few seconds spent its first second in short pushes)."""
SHARED_SHARE = 0.5
"""On a saturated machine, the broker is busy at this part of its own threshold."""

CpuTimes = tuple[float, float]
"""A machine's CPU time since boot, in any unit: (in use, in all)."""
Reading = tuple[float, float, CpuTimes | None]
"""(wall time, the process's CPU seconds, the machine's CPU times)."""


class CpuLoad:
    """The CPU seconds a process spent per second of wall time, and the share of its
    machine's CPU time in use, over about the last ``WINDOW_S``: a window sliding by
    ``STEP_S``."""

    __slots__ = ("_readings", "machine_share", "share")

    def __init__(self) -> None:
        self.share = 0.0
        """CPU seconds per second over the window (1.0: one core all the time; a
        multi-threaded process can exceed it)."""
        self.machine_share = 0.0
        """The share of every CPU of the machine in use over the window (1.0: all of
        them all the time; 0.0 when the machine's times are unknown)."""
        self._readings: deque[Reading] = deque()
        """Readings at least ``STEP_S`` apart, oldest first, none older than the window
        needs (but the two last: a long idle spell is one quiet span)."""

    def observe(
        self, now: float, cpu: Callable[[], float], machine: Callable[[], CpuTimes | None]
    ) -> None:
        """Called often (at each publish): the CPU times (``cpu``, the process's CPU
        seconds, and ``machine``, the machine's CPU times or None when unknown) are read
        only once ``STEP_S`` has passed since the last reading, so the observation costs
        nothing most of the time."""
        readings = self._readings
        if readings and now < readings[-1][0]:  # the wall clock stepped back: start again
            readings.clear()
        if readings and now - readings[-1][0] < STEP_S:
            return
        readings.append((now, cpu(), machine()))
        while len(readings) > 2 and now - readings[0][0] > WINDOW_S:
            readings.popleft()
        if len(readings) > 1:
            (started, used, times), (_, spent, later) = readings[0], readings[-1]
            self.share = max(0.0, spent - used) / (now - started)
            self.machine_share = _in_use(times, later)

    def busy(self, threshold: float, machine_threshold: float = 0.0) -> bool:
        """Whether the window's share reached ``threshold``, or, while the machine's
        share reached ``machine_threshold``, :data:`SHARED_SHARE` of it (a threshold of
        0 or less: never)."""
        if threshold <= 0:
            return False
        if self.share >= threshold:
            return True
        saturated = 0 < machine_threshold <= self.machine_share
        return saturated and self.share >= threshold * SHARED_SHARE


def unknown_machine() -> None:
    """A machine whose CPU times are unknown: it never counts as busy."""
    return None


def _in_use(before: CpuTimes | None, after: CpuTimes | None) -> float:
    """The share of the machine's CPU time in use between two readings (0.0: unknown)."""
    if before is None or after is None:
        return 0.0
    total = after[1] - before[1]
    if total <= 0:
        return 0.0
    return min(1.0, max(0.0, (after[0] - before[0]) / total))
