"""How big a process is: its resident memory and thread count, from /proc/<pid>/status.

A :class:`Sampler` watches a process in the background while an attack runs, so a test can
bound the peak as well as the state after it (a thread burst that has ended by the time the
attack stops is still a burst).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Self

SAMPLE_EVERY_S = 0.05
STOP_TIMEOUT_S = 5.0
KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class Usage:
    """One reading: resident set size in bytes and live threads."""

    rss: int
    threads: int

    @property
    def rss_mib(self) -> float:
        return self.rss / MIB

    def __str__(self) -> str:
        return f"{self.rss_mib:.0f} MiB, {self.threads} threads"


def usage(pid: int) -> Usage:
    """The process's RSS and thread count now; OSError if it is gone."""
    fields: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    rss_kib = int(fields["VmRSS"].split()[0])
    return Usage(rss_kib * KIB, int(fields["Threads"]))


class Sampler:
    """Reads a process's usage every SAMPLE_EVERY_S while in a ``with`` block and keeps
    the peak of each figure (the thread that samples is owned and joined here)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = usage(pid)
        self.peak = self.before
        self.samples = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sample-{pid}", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(STOP_TIMEOUT_S)
        self._take()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self._take()

    def _take(self) -> None:
        try:
            now = usage(self.pid)
        except OSError:  # the process is gone: the test's liveness check says so
            return
        self.samples += 1
        self.peak = Usage(max(self.peak.rss, now.rss), max(self.peak.threads, now.threads))
