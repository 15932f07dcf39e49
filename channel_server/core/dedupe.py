"""The delivered-ID window: ids accepted within the last N ids or T seconds (DESIGN §6).

Ids are kept in a set for lookups and in time-stamped chunks for expiry, so memory per id is
one set slot plus one list slot and expiry is O(expired), not O(window).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

CHUNK_IDS = 4096
"""Ids per chunk; age expiry is exact to the chunk's first timestamp."""


class DeliveredIds:
    """A bounded, FIFO-expiring set of ids."""

    def __init__(self, max_ids: int, max_age_s: float) -> None:
        self.max_ids = max_ids
        self.max_age_s = max_age_s
        self._ids: set[str] = set()
        self._chunks: deque[tuple[float, list[str]]] = deque()
        self.expired_total = 0
        """Ids forgotten so far, oldest first (a durable copy trims as many)."""

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        for _, ids in self._chunks:
            yield from ids

    def add_many(self, event_ids: Iterable[str], now: float) -> None:
        """Remember ids accepted at ``now``; callers add only ids not already present."""
        for event_id in event_ids:
            if not self._chunks or len(self._chunks[-1][1]) >= CHUNK_IDS:
                self._chunks.append((now, []))
            self._chunks[-1][1].append(event_id)
            self._ids.add(event_id)
        self.expire(now)

    def expire(self, now: float) -> int:
        """Forget the oldest ids beyond the count or age bound; returns how many."""
        dropped = 0
        while self._chunks:
            started, ids = self._chunks[0]
            too_old = now - started > self.max_age_s
            if not too_old and len(self._ids) <= self.max_ids:
                break
            excess = len(ids) if too_old else min(len(ids), len(self._ids) - self.max_ids)
            for event_id in ids[:excess]:
                self._ids.discard(event_id)
            del ids[:excess]
            dropped += excess
            if not ids:
                self._chunks.popleft()
        self.expired_total += dropped
        return dropped

    def restore(self, entries: list[tuple[str, float]]) -> None:
        """Load a stored window, oldest first: (id, accepted at)."""
        for event_id, accepted_at in entries:
            if event_id not in self._ids:
                self.add_many([event_id], accepted_at)
