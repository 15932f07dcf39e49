"""A fixed-bucket histogram of seconds, as Prometheus reads one (pure, no locking).

A group keeps one of publish-to-ack latency, the channel one of its store's publish
writes. They are updated under the channel lock by the code that already holds it and
read at scrape time through ``stats()``, so no Prometheus object sits on the hot path.
Observing costs a bisect per value.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from typing import Any

LATENCY_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Upper bounds (seconds) of publish-to-ack latency: a millisecond to a minute (a retried
or redelivered event waits seconds)."""
STORE_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)
"""Upper bounds (seconds) of one store write: a tenth of a millisecond (SQLite, NORMAL)
to half a second (a slow disk, a remote PostgreSQL)."""


class Histogram:
    """Counts per bucket (the last one is +Inf), their sum and count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("bucket bounds must be increasing and not empty")
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def observe_ages(self, now: float, starts: Iterable[float]) -> None:
        """The ages at ``now`` of things that started at ``starts`` (0: unknown, skipped).
        An ack's events share a few start times (its publishes' accept times), so they
        are counted in C and each distinct one is observed once, however many share it."""
        for start, n in Counter(starts).items():
            if start:
                age = now - start
                self.counts[bisect_left(self.bounds, age)] += n
                self.count += n
                self.sum += age * n

    def to_dict(self) -> dict[str, Any]:
        """Cumulative counts per upper bound, Prometheus's ``le`` (the last is ``+Inf``)."""
        cumulative, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            cumulative.append(["+Inf" if bound == float("inf") else bound, running])
        return {"buckets": cumulative, "count": self.count, "sum": round(self.sum, 6)}
