"""Events the SQLite store has in its journal only: not yet rows, not yet acknowledged
(pure: no I/O, no locks; the store guards it with its own lock).

Each publish's events wait here, by channel and offset, until an ack resolves them (then only
their ids are written, into the delivered window) or they have waited long enough to be
moved into SQLite as rows. A journal segment may be deleted once none of its events wait
here (see :mod:`channel_server.store.journal`). Events are taken out as a round writes
what became of them, and put back if its transaction fails.

A round resolves thousands of events: they are looked up and removed by ``map`` over the
offsets (in C), not by a Python loop each.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

from channel_server.events import EVENT_OFFSET, EVENT_SIZE, Event


class _Batch:
    """One publish: when and where it was journaled, and its offsets."""

    __slots__ = ("at", "channel", "offsets", "segment")

    def __init__(self, channel: str, segment: int, at: float, offsets: list[int]) -> None:
        self.channel = channel
        self.segment = segment
        self.at = at
        self.offsets = offsets


class JournaledEvents:
    """Events written to the journal only (the channel's own objects, shared with its
    queues: nothing is copied)."""

    def __init__(self) -> None:
        self._events: dict[str, dict[int, Event]] = {}
        """channel -> offset -> event"""
        self._batches: deque[_Batch] = deque()
        """Oldest first; one whose events are all gone is dropped when segments are checked."""
        self.bytes = 0
        """What the events waiting hold (ids and payloads, as ``Event.size`` counts)."""

    def add(self, channel: str, segment: int, at: float, events: Sequence[Event]) -> None:
        offsets = list(map(EVENT_OFFSET, events))
        self._events.setdefault(channel, {}).update(zip(offsets, events, strict=True))
        self._batches.append(_Batch(channel, segment, at, offsets))
        self.bytes += sum(map(EVENT_SIZE, events))

    def count(self, channel: str) -> int:
        return len(self._events.get(channel, ()))

    def take(self, channel: str, offsets: Sequence[int]) -> tuple[list[Event], list[int]]:
        """Take out the events of ``offsets`` waiting here; returns them and the offsets
        that were not here (rows in SQLite already)."""
        waiting = self._events.get(channel)
        if not waiting:
            return [], list(offsets)
        found = list(map(waiting.pop, offsets, repeat(None)))
        taken = self._gone([ev for ev in found if ev is not None])
        if len(taken) == len(found):
            return taken, []
        return taken, [offset for offset, ev in zip(offsets, found, strict=True) if ev is None]

    def take_older(self, cutoff: float | None) -> dict[str, list[Event]]:
        """Take out the events of batches journaled before ``cutoff`` (None: every one):
        channel -> events, oldest first."""
        moving: dict[str, list[Event]] = {}
        for batch in self._batches:
            if cutoff is not None and batch.at >= cutoff:
                break
            waiting = self._events.get(batch.channel)
            if waiting:
                found = map(waiting.pop, batch.offsets, repeat(None))
                if taken := self._gone([ev for ev in found if ev is not None]):
                    moving.setdefault(batch.channel, []).extend(taken)
        return moving

    def _gone(self, taken: list[Event]) -> list[Event]:
        """Events just taken out (no longer counted in ``bytes``)."""
        self.bytes -= sum(map(EVENT_SIZE, taken))
        return taken

    def put_back(self, channel: str, events: Iterable[Event]) -> None:
        """Events taken out by a round whose transaction failed: they wait again."""
        events = list(events)
        self._events.setdefault(channel, {}).update((ev.offset, ev) for ev in events)
        self.bytes += sum(map(EVENT_SIZE, events))

    def idle_segments(self, closed: Iterable[int]) -> list[int]:
        """Of the ``closed`` segments, those no event waits in (they may be deleted); drops
        the batches whose events are all gone from the front."""
        closed = list(closed)
        if not closed:
            return []
        last = max(closed)
        busy: set[int] = set()
        for batch in self._batches:
            if batch.segment > last:
                break
            if batch.segment in busy:
                continue  # one event of it waits already: no need to look at the rest
            waiting = self._events.get(batch.channel)
            if waiting and not waiting.keys().isdisjoint(batch.offsets):
                busy.add(batch.segment)
        while self._batches and self._batches[0].segment not in busy:
            front = self._batches[0]
            if front.segment > last:
                break
            self._batches.popleft()
        return [segment for segment in closed if segment not in busy]

    def payloads(self, channel: str, offsets: Iterable[int]) -> dict[int, Any]:
        """offset -> payload of those ``offsets`` waiting here."""
        waiting = self._events.get(channel, {})
        return {o: waiting[o].payload for o in offsets if o in waiting}
