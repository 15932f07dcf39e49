"""The global queue and the per-(publisher, partition) sub-queues (DESIGN §1, §5).

Both keep events in ``(timestamp, offset)`` order, so a batch published out of timestamp
order, or events put back after a failed push, come out in order again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from itertools import chain, islice
from operator import attrgetter

from sortedcontainers import SortedList

from channel_server.events import Event, PartitionKey

NOTHING_HELD: frozenset[int] = frozenset()
"""The held-back offsets of a partition that holds none (shared: no set per partition)."""
SHORT_PENDING = 1024
"""A partition holding more pending events than this keeps them in a deque: taking from
the front of a plain list moves everything behind."""
_ENDS_ONLY = (list, deque)
"""The pending queues that take events at their ends only."""
Warm = Callable[[list[Event]], None]
"""Gives the cold events of a batch their payloads back, in place (see spill)."""


def warm_nothing(events: list[Event]) -> None:
    """A group over a store without cold events warms nothing."""


DELIVERY_ORDER = attrgetter("timestamp", "offset")
"""Sort key of ``(timestamp, offset)``: compared in C, faster than ``Event.__lt__``."""


class GlobalQueue:
    """Accepted events not yet split into partition sub-queues, in timestamp order.

    It is drained on every publish, so it holds one batch at a time: a list sorted once
    when drained is all it needs.
    """

    def __init__(self) -> None:
        self._events: list[Event] = []

    def __len__(self) -> int:
        return len(self._events)

    def add_many(self, events: Iterable[Event]) -> None:
        self._events.extend(events)

    def drain(self) -> list[Event]:
        """Everything queued, in ``(timestamp, offset)`` order; the queue is left empty."""
        events, self._events = self._events, []
        events.sort(key=DELIVERY_ORDER)
        return events

    def clear(self) -> None:
        self._events.clear()


class QueueCount:
    """How many events a group's partition sub-queues hold, pending and in flight, kept
    up to date by each :class:`PartitionQueue` of the group as it changes. It is the
    right side of the channel's invariant (held == queued + in flight), checked on every
    publish and get: reading it costs O(1), counting the queues O(partitions)."""

    __slots__ = ("events", "holding", "in_flight")

    def __init__(self) -> None:
        self.events = 0
        self.in_flight = 0
        """Of ``events``, those in flight."""
        self.holding: dict[PartitionKey, None] = {}
        """The partitions holding any event: what ``stats`` looks through for the busiest,
        so a group with 100,000 idle partitions answers in what it holds."""


class PartitionQueue:
    """One partition of one consumer group: its pending events and those in flight.

    ``owner`` is the member the partition is assigned to (sticky), or None. Events are
    delivered in order and the partition takes no new delivery until every event in flight
    is resolved (acknowledged, put back or dead-lettered).

    Some pending events may have been processed by the owner already, their acks lost: the
    events a restarted broker restored (``pinned`` counts them: their acks were not yet
    written), and those that came back from the owner after a skipped ack or a failed push
    (``held_back``, by offset: the push may have arrived). Until they are resolved the
    partition stays with its owner, whose processed-ID window acknowledges them without
    running its handler again, so that no rebalance hands them to another member.

    ``pending`` and ``in_flight`` are read freely but changed only by the methods here,
    which keep the group's :class:`QueueCount` (``count``; one of its own if not given).
    """

    __slots__ = (
        "_count",
        "held_back",
        "idle_since",
        "in_flight",
        "key",
        "owner",
        "pending",
        "pinned",
    )

    def __init__(self, key: PartitionKey, count: QueueCount | None = None) -> None:
        self.key = key
        self._count = QueueCount() if count is None else count
        self.pending: list[Event] | deque[Event] | SortedList = []
        """In delivery order. Events nearly always arrive at an end (a publisher's
        timestamps rise; events put back after a failed push or a lost ack are older than
        all that wait), and most partitions hold a few: a plain list, the cheapest there
        is in time and memory (88 bytes for one event, a SortedList 424, a deque 760).
        More than ``SHORT_PENDING`` waiting make it a deque (a long backlog: takes from
        the front in O(1) each; a SortedList deleted them one by one, 1.1 µs each). An
        event landing in the middle makes it a SortedList (O(log n) inserts and takes: no
        publisher can make a publish cost a sort). Either stays until it empties."""
        self.in_flight: list[Event] = []
        self.owner: str | None = None
        self.idle_since: float | None = None
        self.pinned = 0
        self.held_back: set[int] | frozenset[int] = NOTHING_HELD
        """Offsets of pending events the owner may have processed (see the class); a set
        only once there are any, so most partitions spend nothing on it."""

    @property
    def ready(self) -> bool:
        """Has events to send and none in flight (per-partition order)."""
        return bool(self.pending) and not self.in_flight

    @property
    def idle(self) -> bool:
        return not self.pending and not self.in_flight

    @property
    def movable(self) -> bool:
        """May change owner now: nothing in flight and nothing its owner may have done."""
        return not self.in_flight and not self.pinned and not self.held_back

    def release_pins(self) -> None:
        """The owner goes (left, or declared dead): nothing is owed to it any more."""
        self.pinned = 0
        self.held_back = NOTHING_HELD

    def hold(self, offsets: Iterable[int]) -> None:
        """These events may have reached the owner: they stay with it (``held_back``)."""
        if isinstance(self.held_back, frozenset):
            self.held_back = set(self.held_back)
        self.held_back.update(offsets)

    def unhold(self, offsets: Iterable[int]) -> None:
        """These events are no longer the owner's to settle (resolved, or anyone's now)."""
        if self.held_back:
            self.held_back = self.held_back.difference(offsets) or NOTHING_HELD

    def take(self, limit: int, warm: Warm = warm_nothing) -> tuple[list[Event], int]:
        """Move pending events, oldest first, into flight: every event held back for the
        owner (it owes them already), the others before them (order comes first), and up
        to ``limit`` others in all. Returns them and how many were not held back.

        ``warm`` gives cold events their payloads back first (see
        :mod:`~channel_server.core.spill`); when it raises, nothing was taken."""
        pending = self.pending
        if not self.held_back and type(pending) is list and len(pending) <= limit:
            warm(pending)  # the usual take: all of a short list, moved rather than copied
            self.pending = []
            self._fly(pending)
            return pending, len(pending)
        if not self.held_back:
            batch = self._front(limit)
            fresh = len(batch)
        else:
            batch, fresh, owed = [], 0, self.held_pending()
            for ev in self.pending:
                if ev.offset in self.held_back:
                    owed -= 1
                elif fresh >= limit and not owed:
                    break
                else:
                    fresh += 1
                batch.append(ev)
        warm(batch)
        self._drop_front(len(batch))
        self._fly(batch)
        return batch, fresh

    def take_head(self, warm: Warm = warm_nothing) -> tuple[list[Event], int]:
        """Move only the oldest pending event into flight (a suspect of killing its
        subscribers goes alone, held back or not). Returns it, and 1 if it was not held
        back (as :meth:`take`)."""
        batch = self._front(1)
        warm(batch)
        self._drop_front(len(batch))
        self._fly(batch)
        return batch, sum(1 for ev in batch if ev.offset not in self.held_back)

    def _fly(self, batch: list[Event]) -> None:
        """``batch`` (out of pending already) is in flight now, replacing what was (a ready
        partition has nothing in flight)."""
        count, was = self._count, len(self.in_flight)
        count.events -= was
        count.in_flight += len(batch) - was
        self.in_flight = batch
        if not batch and not self.pending:
            self._note()

    def held_pending(self) -> int:
        """Pending events held back for the owner."""
        if not self.held_back:
            return 0
        return sum(1 for ev in self.pending if ev.offset in self.held_back)

    def resolve(self, events: list[Event]) -> None:
        """Events in flight are done with here (acknowledged, put back or dead)."""
        before = len(self.in_flight)
        if len(events) == before:
            self.in_flight = []
        else:
            gone = set(events)  # events hash by identity
            self.in_flight = [ev for ev in self.in_flight if ev not in gone]
        resolved = before - len(self.in_flight)
        self._count.events -= resolved
        self._count.in_flight -= resolved
        if not self.in_flight and not self.pending:
            self._count.holding.pop(self.key, None)  # it holds nothing now

    def put_back(self, events: list[Event]) -> int:
        """Return unacknowledged events to the pending queue (they re-sort into place)."""
        pending, added = self.pending, len(events)
        if not pending and type(pending) is list and added <= SHORT_PENDING:
            pending.extend(events if added == 1 else sorted(events, key=DELIVERY_ORDER))
            self._count.events += added  # (the usual case: an empty partition, inlined)
            if added and not self.in_flight:
                self._count.holding[self.key] = None
            return added
        new = events if added == 1 else sorted(events, key=DELIVERY_ORDER)
        if not isinstance(pending, _ENDS_ONLY):  # (not SortedList: slow on its ABC)
            pending.update(new)
        elif not pending or not new or DELIVERY_ORDER(new[0]) >= DELIVERY_ORDER(pending[-1]):
            pending.extend(new)
        elif DELIVERY_ORDER(new[-1]) > DELIVERY_ORDER(pending[0]):
            self.pending = SortedList(chain(pending, new))
        elif isinstance(pending, deque):
            pending.extendleft(reversed(new))
        else:
            pending[:0] = new
        if type(self.pending) is list and len(self.pending) > SHORT_PENDING:
            self.pending = deque(self.pending)
        self._count.events += len(new)
        if new and len(self.pending) == len(new) and not self.in_flight:
            self._count.holding[self.key] = None  # it held nothing: now it does
        return len(new)

    def remove_pending(self, events: list[Event]) -> None:
        """Take pending events out for good (done while they waited here)."""
        for ev in events:
            self.pending.remove(ev)
        self._count.events -= len(events)
        self._settle()
        self._note()

    def drop_pending(self) -> int:
        """Empty the pending queue (the fault kill_queues); returns how many it held."""
        dropped = len(self.pending)
        self.pending = []
        self._count.events -= dropped
        self._note()
        return dropped

    def _front(self, count: int) -> list[Event]:
        """The ``count`` oldest pending events (a copy)."""
        if type(self.pending) is list:
            return self.pending[: max(0, count)]
        return list(islice(self.pending, max(0, count)))

    def _drop_front(self, count: int) -> None:
        """Remove the ``count`` oldest pending events."""
        pending = self.pending
        if isinstance(pending, deque):
            for _ in range(count):
                pending.popleft()
        else:
            del pending[:count]
        self._settle()

    def _note(self) -> None:
        """Keep the group's set of partitions holding events in step (after a change)."""
        if self.pending or self.in_flight:
            self._count.holding[self.key] = None
        else:
            self._count.holding.pop(self.key, None)

    def _settle(self) -> None:
        """An emptied deque or SortedList goes back to being a list."""
        if not self.pending and type(self.pending) is not list:
            self.pending = []
