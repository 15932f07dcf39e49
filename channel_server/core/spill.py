"""Which queued events keep their payloads in memory (DESIGN §7: the backup queue).

A channel over a durable store has every accepted event's payload on disk before it is
queued, so a long backlog need not hold them twice. The oldest ``budget`` bytes of the
backlog keep their payloads; events accepted past it are queued *cold* (their payload
replaced by :data:`COLD`) and get it back from the store when they are taken for
delivery. Only pending events are ever cold: an event taken, in flight, put back, dead or
replayed holds its payload, so everything that leaves a partition (a push, a get, a dead
letter, a replay) has it.

A million queued events of 100 bytes held 431 bytes each with their payloads; a payload
is ~150 of them (its object, one per event). The cost of a cold event: one read of its
row when it is taken, a batch at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from msgspec.structs import replace

from channel_server.errors import StoreError
from channel_server.events import Event


class _Cold:
    """The payload of a cold event: it is in the store. Not serializable on purpose."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "COLD"


COLD: Final = _Cold()

PayloadReader = Callable[[list[int]], dict[int, Any]]
"""offsets -> their payloads, as the store keeps them (every offset asked for that it
holds)."""


class PayloadSpill:
    """The rule for one channel: ``budget`` bytes of its backlog keep their payloads.

    Without a ``reader`` (a store that keeps events in memory anyway) nothing goes cold.
    """

    def __init__(self, budget: int, reader: PayloadReader | None = None) -> None:
        self.budget = budget
        self.reader = reader
        self.cooled_total = 0
        """Events queued cold in this life."""
        self.warmed_total = 0
        """Cold events whose payloads were read back."""

    def cool(self, events: list[Event], queued_bytes: int) -> list[Event]:
        """``events`` (in the order they will be queued) as they should be kept, when
        ``queued_bytes`` of the backlog are queued before them: those past the budget
        cold. Returns the same list when all stay as they are."""
        if self.reader is None or queued_bytes + _bytes(events) <= self.budget:
            return events
        kept = list(cold_past(events, self.budget, queued_bytes))
        self.cooled_total += sum(1 for ev, was in zip(kept, events, strict=True) if ev is not was)
        return kept

    def warm(self, events: list[Event]) -> None:
        """Give the cold events of ``events`` their payloads back, in place (one read).

        Raises :class:`~channel_server.errors.StoreError` (a typed error a pull client
        gets as itself) and changes nothing when the store lacks one: it lost an
        unacknowledged event."""
        if self.reader is None or (len(events) == 1 and events[0].payload is not COLD):
            return  # none can be cold (no store gives any back); or the usual take of one
        cold = [i for i, ev in enumerate(events) if ev.payload is COLD]
        if not cold:
            return
        offsets = [events[i].offset for i in cold]
        payloads = self.reader(offsets)
        missing = [offset for offset in offsets if offset not in payloads]
        if missing:
            raise StoreError("backup queue", f"no payload stored for queued offsets {missing[:10]}")
        for i in cold:
            events[i] = replace(events[i], payload=payloads[events[i].offset])
        self.warmed_total += len(cold)


def cold_past(events: Iterable[Event], budget: int | None, held: int = 0) -> Iterator[Event]:
    """``events`` (oldest first, ``held`` bytes queued before them) with those past
    ``budget`` bytes cold, one at a time: a store reading a backlog back drops their
    payloads as it reads. ``None``: every payload."""
    for ev in events:
        if budget is None or held < budget or ev.payload is COLD:
            yield ev
        else:
            yield replace(ev, payload=COLD)
        held += ev.size


def cold_count(events: Iterable[Event]) -> int:
    """How many of ``events`` are cold (for tests and stats)."""
    return sum(1 for ev in events if ev.payload is COLD)


def _bytes(events: list[Event]) -> int:
    return sum(ev.size for ev in events)
