"""The delivered-ID window: ids accepted within the last N ids or T seconds (DESIGN §6).

What it holds is the channel's dedupe key: the event id on a channel whose ids are unique
per channel, the uid (``publisher_id/id``) on one whose ids are unique per publisher.

Ids are kept in a set for lookups and in time-stamped chunks for expiry, so memory per id is
one set slot plus one list slot and expiry is O(expired), not O(window). A chunk spans at
most ``CHUNK_IDS`` ids and ``max_age_s / CHUNK_SPANS`` seconds, and is forgotten by age only
when its newest id is too old: ids are never forgotten early, at most one span late.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from itertools import groupby
from operator import itemgetter

CHUNK_IDS = 4096
CHUNK_SPANS = 1000
"""Chunks per window age: the age bound is exact to max_age_s / CHUNK_SPANS."""


class _Chunk:
    __slots__ = ("first", "ids", "last")

    def __init__(self, now: float) -> None:
        self.first = self.last = now
        self.ids: list[str] = []


class DeliveredIds:
    """A bounded, FIFO-expiring set of ids."""

    def __init__(self, max_ids: int, max_age_s: float) -> None:
        self.max_ids = max_ids
        self.max_age_s = max_age_s
        self._span_s = max_age_s / CHUNK_SPANS
        self._ids: set[str] = set()
        self._chunks: deque[_Chunk] = deque()
        self.expired_total = 0
        """Ids forgotten so far, oldest first (a durable copy trims as many)."""

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        for chunk in self._chunks:
            yield from chunk.ids

    def add_many(self, event_ids: Iterable[str], now: float) -> None:
        """Remember ids accepted at ``now``; callers add only ids not already present."""
        fresh = list(event_ids)
        self._ids.update(fresh)
        self._append(fresh, now)
        self.expire(now)

    def expire(self, now: float) -> int:
        """Forget the oldest ids beyond the count or age bound; returns how many."""
        dropped = 0
        while self._chunks:
            chunk = self._chunks[0]
            too_old = now - chunk.last > self.max_age_s
            if not too_old and len(self._ids) <= self.max_ids:
                break
            ids = chunk.ids
            excess = len(ids) if too_old else min(len(ids), len(self._ids) - self.max_ids)
            self._ids.difference_update(ids[:excess])
            del ids[:excess]
            dropped += excess
            if not ids:
                self._chunks.popleft()
        self.expired_total += dropped
        return dropped

    def restore(self, entries: Iterable[tuple[str, float]]) -> None:
        """Load a stored window, oldest first: (id, accepted at). Expires once at the end.
        Ids of one publish share their time, so each run of them is added whole (a
        restart may load a million, so a generator is welcome)."""
        for accepted_at, run in groupby(entries, key=itemgetter(1)):
            fresh = [
                i for i in dict.fromkeys(event_id for event_id, _ in run) if i not in self._ids
            ]
            self._ids.update(fresh)
            self._append(fresh, accepted_at)
        if self._chunks:
            self.expire(max(chunk.last for chunk in self._chunks))

    def _append(self, fresh: list[str], accepted_at: float) -> None:
        """Put ids accepted at one time into chunks, a chunk's worth at a time."""
        start = 0
        while start < len(fresh):
            chunk = self._chunks[-1] if self._chunks else None
            room = CHUNK_IDS - len(chunk.ids) if chunk else 0
            if chunk is None or room <= 0 or accepted_at - chunk.first > self._span_s:
                chunk = _Chunk(accepted_at)
                self._chunks.append(chunk)
                room = CHUNK_IDS
            chunk.ids.extend(fresh[start : start + room])
            chunk.last = max(chunk.last, accepted_at)
            start += room
