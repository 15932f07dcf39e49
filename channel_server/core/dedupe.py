"""The delivered-ID window: ids accepted within the last N ids or T seconds (DESIGN §6).

Ids are kept per realm: the publisher on a channel whose ids are unique per publisher, ``""``
on one whose ids are unique per channel. A realm's ids are a set of the events' own id
strings, so a million remembered ids cost no string of their own (a ``publisher_id/id`` uid
per id was 64 more bytes each).

Ids are kept in a set for lookups and in time-stamped chunks for expiry, so memory per id is
one set slot plus one list slot and expiry is O(expired), not O(window). A chunk spans at
most ``CHUNK_IDS`` ids and ``max_age_s / CHUNK_SPANS`` seconds, and is forgotten by age only
when its newest id is too old: ids are never forgotten early, at most one span late.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Set
from itertools import groupby
from operator import itemgetter

CHUNK_IDS = 4096
CHUNK_SPANS = 1000
"""Chunks per window age: the age bound is exact to max_age_s / CHUNK_SPANS."""
CHANNEL_REALM = ""
"""The realm of every id on a channel whose ids are unique per channel."""
_NO_IDS: frozenset[str] = frozenset()


class _Chunk:
    __slots__ = ("first", "ids", "last", "realm")

    def __init__(self, now: float, realm: str) -> None:
        self.first = self.last = now
        self.realm = realm
        self.ids: list[str] = []

    def takes(self, realm: str, accepted_at: float, span_s: float) -> bool:
        """Whether ids of ``realm`` accepted at ``accepted_at`` belong here (room aside)."""
        return realm == self.realm and accepted_at - self.first <= span_s


class DeliveredIds:
    """A bounded, FIFO-expiring set of ids, each in a realm (``in`` asks the channel's)."""

    def __init__(self, max_ids: int, max_age_s: float) -> None:
        self.max_ids = max_ids
        self.max_age_s = max_age_s
        self._span_s = max_age_s / CHUNK_SPANS
        self._realms: dict[str, set[str]] = {}
        self._count = 0
        self._chunks: deque[_Chunk] = deque()
        self.expired_total = 0
        """Ids forgotten so far, oldest first (a durable copy trims as many)."""

    def known(self, realm: str) -> Set[str]:
        """The ids remembered in ``realm`` (a live view: do not keep it across changes)."""
        return self._realms.get(realm, _NO_IDS)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self.known(CHANNEL_REALM)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        """Every realm's ids, oldest first."""
        for chunk in self._chunks:
            yield from chunk.ids

    def entries(self) -> Iterator[tuple[str, str]]:
        """(realm, id) of every id, oldest first."""
        for chunk in self._chunks:
            for event_id in chunk.ids:
                yield chunk.realm, event_id

    def add_many(self, event_ids: Iterable[str], now: float, realm: str = CHANNEL_REALM) -> None:
        """Remember ids accepted at ``now``; callers add only ids not already present."""
        fresh = list(event_ids)
        self._add(realm, fresh, now)
        self.expire(now)

    def _add(self, realm: str, fresh: list[str], accepted_at: float) -> None:
        if not fresh:
            return
        ids = self._realms.get(realm)
        if ids is None:
            ids = self._realms[realm] = set()
        ids.update(fresh)
        self._count += len(fresh)
        self._append(realm, fresh, accepted_at)

    def expire(self, now: float) -> int:
        """Forget the oldest ids beyond the count or age bound; returns how many."""
        dropped = 0
        while self._chunks:
            chunk = self._chunks[0]
            too_old = now - chunk.last > self.max_age_s
            if not too_old and self._count <= self.max_ids:
                break
            ids = chunk.ids
            excess = len(ids) if too_old else min(len(ids), self._count - self.max_ids)
            self._forget(chunk.realm, ids[:excess])
            del ids[:excess]
            dropped += excess
            if not ids:
                self._chunks.popleft()
        self.expired_total += dropped
        return dropped

    def _forget(self, realm: str, expired: list[str]) -> None:
        ids = self._realms[realm]
        ids.difference_update(expired)
        self._count -= len(expired)
        if not ids:
            del self._realms[realm]

    def restore(self, entries: Iterable[tuple[str, str, float]]) -> None:
        """Load a stored window, oldest first: (realm, id, accepted at). Expires once at
        the end. Ids of one publish share their realm and time, so each run of them is
        added whole (a restart may load a million, so a generator is welcome)."""
        for (realm, accepted_at), run in groupby(entries, key=itemgetter(0, 2)):
            known = self.known(realm)
            fresh = [i for i in dict.fromkeys(event_id for _, event_id, _ in run) if i not in known]
            self._add(realm, fresh, accepted_at)
        if self._chunks:
            self.expire(max(chunk.last for chunk in self._chunks))

    def _append(self, realm: str, fresh: list[str], accepted_at: float) -> None:
        """Put ids of one realm accepted at one time into chunks, a chunk's worth at a
        time (a chunk holds one realm's ids)."""
        start = 0
        while start < len(fresh):
            chunk = self._chunks[-1] if self._chunks else None
            room = CHUNK_IDS - len(chunk.ids) if chunk else 0
            if chunk is None or room <= 0 or not chunk.takes(realm, accepted_at, self._span_s):
                chunk = _Chunk(accepted_at, realm)
                self._chunks.append(chunk)
                room = CHUNK_IDS
            chunk.ids.extend(fresh[start : start + room])
            chunk.last = max(chunk.last, accepted_at)
            start += room
