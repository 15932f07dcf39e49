"""The broker's threads on one CPU (``serve --cpu``).

The broker runs Python on one core at a time (the GIL), and its threads hand the GIL to
one another thousands of times a second: each publish, push and ack wakes a thread. Across
cores each hand-off is a wake-up of another CPU; on one core it is a switch within it.
Measured with the process pinned against not (docs/benchmarks.md, "One CPU for the
broker"): the default workload 1.19-1.23x the events/s with a fifth less broker CPU per
event, 10,000 partitions 1.18-1.23x, batch 1 1.06-1.11x.

``auto`` (the default) pins the process to the CPU that was idlest over a short sample
when it starts, so brokers started on one machine spread out; ``all`` leaves the CPUs to
the OS; a number names the CPU. Only Linux pins; elsewhere ``auto`` does nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path

from channel_server.core.load import CpuTimes
from channel_server.errors import InvalidArgument
from channel_server.machine_cpu import PROC_STAT, per_cpu

AUTO = "auto"
ALL = "all"
SAMPLE_S = 0.05
"""How long ``auto`` watches the CPUs to find the idlest (added to the broker's start)."""
TASKS = Path("/proc/self/task")


def cpu_choice(text: str) -> str:
    """``--cpu``'s value: ``auto``, ``all`` or a CPU number."""
    if text in (AUTO, ALL) or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"must be auto, all or a CPU number: {text}")


NEAR_IDLEST = 0.9
"""CPUs idle at least this share of the idlest's time count as idle as it: brokers that
start together on a quiet machine then spread by process id instead of all taking one."""


def idlest(
    before: dict[int, CpuTimes],
    after: dict[int, CpuTimes],
    allowed: Iterable[int],
    spread: int = 0,
) -> int:
    """The allowed CPU that was idle the longest between two samples; one not sampled
    counts as busy. Among those about as idle (``NEAR_IDLEST``), highest first (away from
    CPU 0, where Linux sends most interrupts), ``spread`` (a process id) picks one."""

    def idle(cpu: int) -> float:
        if cpu not in before or cpu not in after:
            return -1.0
        (busy0, total0), (busy1, total1) = before[cpu], after[cpu]
        return (total1 - total0) - (busy1 - busy0)

    ranked = sorted(allowed, key=lambda cpu: (idle(cpu), cpu), reverse=True)
    best = idle(ranked[0])
    near = [cpu for cpu in ranked if best > 0 and idle(cpu) >= NEAR_IDLEST * best]
    return near[spread % len(near)] if near else ranked[0]


def pin(choice: str) -> str | None:
    """Pin this process, every thread it has and those it starts, as ``choice`` says.
    Returns what was done, for the log (None: nothing). Raises InvalidArgument for a CPU
    this process may not use, or a number on a system that cannot pin."""
    if choice == ALL:
        return None
    if not hasattr(os, "sched_setaffinity"):
        if choice == AUTO:
            return None
        raise InvalidArgument("--cpu", "this system cannot pin a process to a CPU")
    allowed = sorted(os.sched_getaffinity(0))
    if choice == AUTO:
        if len(allowed) < 2:
            return None
        before = _proc_stat()
        time.sleep(SAMPLE_S)  # a one-off wait at start, before any thread
        cpu = idlest(before, _proc_stat(), allowed, os.getpid())
    else:
        cpu = int(choice)
        if cpu not in allowed:
            raise InvalidArgument("--cpu", f"CPU {cpu} is not one this process may use {allowed}")
    for task in _tasks():
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(task, {cpu})
    how = "the idlest" if choice == AUTO else "--cpu"
    return f"pinned to CPU {cpu} of {allowed} ({how}; --cpu all leaves the CPUs to the OS)"


def pinned_cpu() -> int | None:
    """The one CPU this process may run on, on a machine of more (None: not pinned)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = os.sched_getaffinity(0)
    return next(iter(cpus)) if len(cpus) == 1 and (os.cpu_count() or 1) > 1 else None


def _proc_stat() -> dict[int, CpuTimes]:
    try:
        return per_cpu(PROC_STAT.read_text())
    except OSError:
        return {}


def _tasks() -> list[int]:
    """This process's threads (the caller's alone where /proc cannot list them)."""
    try:
        return [int(task.name) for task in TASKS.iterdir()]
    except OSError:
        return [0]
