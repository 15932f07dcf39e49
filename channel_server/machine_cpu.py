"""The machine's CPU time, read from Linux's ``/proc/stat`` (how busy the machine the
broker runs on is; see :mod:`~channel_server.core.load`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from channel_server.core.load import CpuTimes

log = logging.getLogger(__name__)
PROC_STAT = Path("/proc/stat")
IDLE_FIELDS = (3, 4)
"""idle and iowait among the first line's times: user nice system idle iowait irq softirq
steal (guest and guest_nice are counted in user and nice already)."""
COUNTED_FIELDS = 8
"""The times that add up to all of the CPUs' time."""


class MachineCpu:
    """Reads the machine's CPU times, or those of the one CPU ``cpu`` when the broker is
    pinned to it (:mod:`~channel_server.cpu_pin`): that CPU saturated is what keeps a
    pinned broker from going faster, whatever the other CPUs do. None on a system without
    ``/proc/stat`` (then the machine never counts as busy). Says once that it cannot."""

    def __init__(self, path: Path = PROC_STAT, cpu: int | None = None) -> None:
        self.path = path
        self.cpu = cpu
        self._warned = False

    def __call__(self) -> CpuTimes | None:
        if self.cpu is not None:
            return self._one_cpu(self.cpu)
        try:
            with self.path.open("rb") as f:
                first = f.readline().split()
            times = _busy_total(first[1:])
        except (OSError, ValueError) as exc:
            self._unknown(f"cannot read the machine's CPU times: {exc}")
            return None
        if first[:1] != [b"cpu"] or times is None:
            self._unknown(f"unexpected first line in {self.path}")
            return None
        return times

    def _one_cpu(self, cpu: int) -> CpuTimes | None:
        try:
            times = per_cpu(self.path.read_text()).get(cpu)
        except OSError as exc:
            self._unknown(f"cannot read the machine's CPU times: {exc}")
            return None
        if times is None:
            self._unknown(f"no line for CPU {cpu} in {self.path}")
        return times

    def _unknown(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            log.info("%s: the broker's own CPU alone says when it is busy", why)


def per_cpu(text: str) -> dict[int, CpuTimes]:
    """Each CPU's (busy, total) times from the ``cpuN`` lines of ``/proc/stat``'s text
    (lines it cannot read are left out)."""
    times: dict[int, CpuTimes] = {}
    for line in text.splitlines():
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        with contextlib.suppress(ValueError):
            if (cpu := _busy_total(fields)) is not None:
                times[int(name[3:])] = cpu
    return times


def _busy_total(fields: Sequence[str | bytes]) -> CpuTimes | None:
    """(busy, total) from a ``cpu`` line's times (after its name): every counted time
    but idle and iowait is busy; None when the line holds too few (ValueError: not
    numbers)."""
    counted = [int(field) for field in fields[:COUNTED_FIELDS]]
    if len(counted) <= max(IDLE_FIELDS):
        return None
    total = sum(counted)
    return total - sum(counted[i] for i in IDLE_FIELDS), total
