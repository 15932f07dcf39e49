"""Store writes that may land a moment later, batched: acks, deletes, delivered-window trims.

The publish path is the one that must be durable at once; these follow it. Deferring them
takes them off the threads that hold a channel's lock, and turns thousands of small writes
into one transaction. Losing them in a crash is safe (see :mod:`channel_server.store.base`).
No I/O here: the store adds from any thread, and whoever writes takes the whole lot.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class PendingWrites:
    """One batch of deferred writes, in the order they must be applied: acks, deletes
    (which also drop the acks of the offsets they delete), trims."""

    acks: list[tuple[str, str, int]] = field(default_factory=list)
    """(channel, group, offset)"""
    deletes: dict[str, list[int]] = field(default_factory=dict)
    """channel -> offsets every group acknowledged"""
    trims: dict[str, int] = field(default_factory=dict)
    """channel -> how many of the oldest delivered ids to forget"""

    def __bool__(self) -> bool:
        return bool(self.acks or self.deletes or self.trims)

    def extend(self, newer: PendingWrites) -> None:
        """Append a later batch to this one."""
        self.acks.extend(newer.acks)
        for channel, offsets in newer.deletes.items():
            self.deletes.setdefault(channel, []).extend(offsets)
        for channel, count in newer.trims.items():
            self.trims[channel] = self.trims.get(channel, 0) + count


class DeferredWrites:
    """The writes waiting for the next batch; safe to use from any thread."""

    def __init__(self) -> None:
        # Guards _pending. A leaf: taken from any thread (under a channel lock by acks and
        #   deletes, under the SQLite store's locks by count), never held over a call out.
        self._lock = threading.Lock()
        self._pending = PendingWrites()

    def ack(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        with self._lock:
            self._pending.acks.extend((channel, group, offset) for offset in offsets)

    def delete(self, channel: str, offsets: Sequence[int]) -> None:
        with self._lock:
            self._pending.deletes.setdefault(channel, []).extend(offsets)

    def trim(self, channel: str, count: int) -> None:
        with self._lock:
            self._pending.trims[channel] = self._pending.trims.get(channel, 0) + count

    def deleting(self, channel: str) -> int:
        """How many distinct events of the channel wait for their delete."""
        with self._lock:
            return len(set(self._pending.deletes.get(channel, ())))

    def take(self) -> PendingWrites:
        """Everything waiting, leaving nothing behind."""
        with self._lock:
            taken, self._pending = self._pending, PendingWrites()
        return taken

    def put_back(self, failed: PendingWrites) -> None:
        """Return a batch that could not be written, ahead of what came in since."""
        with self._lock:
            failed.extend(self._pending)
            self._pending = failed


def write_in_background(
    stop: threading.Event,
    interval_s: float,
    write: Callable[[int], None],
    where: object,
    errors: tuple[type[Exception], ...],
) -> None:
    """A store's maintenance thread: ``write(round number)`` every ``interval_s`` until
    ``stop`` is set. A failure is retried the next round; it is logged once, and so is the
    recovery, not every round. One not of the ``errors`` expected (a bug, no memory) is
    retried too, and logged with its traceback: a thread ended by it would leave acks
    deferred in memory for good, the journal growing and the WAL never copied back."""
    failing = False
    for round_no in itertools.count(1):
        if stop.wait(interval_s):
            return
        try:
            write(round_no)
        except Exception as exc:
            if not failing:
                log.error(
                    "background writes to %s fail (retrying): %s",
                    where,
                    exc,
                    exc_info=not isinstance(exc, errors),
                )
            failing = True
            continue
        if failing:
            log.warning("background writes to %s work again", where)
        failing = False
