"""How publishes arrive on a channel: whether a short push is worth a linger (pure).

A member holding nothing is pushed what is ready at once, unless waiting a moment would
make its push markedly fuller. That depends on how events arrive, not on how many are
ready: a stream of small publishes (one event per publish, a publish every millisecond)
brings more during a linger; a burst (a hundred events every 10 ms) came whole, and a
linger only adds its time to every event's latency. So the channel keeps the average gap
between publishes, and each member the publish count at its last push: the events a
member was given per publish since then are what each publish during a linger is
expected to bring it.

A broker busy on its CPU (:mod:`~channel_server.core.load`) may wait longer: as long as
the member's push is expected to take to fill, within a bound (:meth:`Arrivals.filling_linger`).
"""

from __future__ import annotations

import math

SMOOTHING = 0.1
"""Weight of the newest gap in the moving average: the last dozen or so publishes count,
so a paced publisher catching up on a late tick (two publishes back to back among
publishes 10 ms apart) does not look like a stream."""
LINGER_GAIN = 0.5
"""A linger is worth it when it is expected to make a push at least half again as full."""
QUIET_GAPS = 4
"""Publishes have stopped (for a filling wait) once none came for this many average gaps:
the events a wait expects will not come."""
FILL_SHORT = 1.5
"""A busy broker's push waits to fill only when it is at most 1/FILL_SHORT (two thirds)
full: fuller pushes already spread the cost of a push thin, and a member kept waiting for
more events has nothing to do meanwhile. Against a third (3), alternating (session 24):
64 subscribers 1.09x (10 pairs, 1.04-1.24; the same code against itself 0.90-1.02), 256
subscribers 1.05x and 1.10x, 4 subscribers, 10,000 partitions and batch 1 unchanged, p99
at 100,000 events/s offered 13-17 ms against 16-18."""


class Arrivals:
    """The publishes of one channel: a count, and the moving average of their gaps."""

    __slots__ = ("_last", "count", "gap_s")

    def __init__(self) -> None:
        self.count = 0
        """Publishes that queued events, since the channel started (a member remembers
        this at its push)."""
        self.gap_s = math.inf
        """The moving average of the gaps between them (inf: fewer than two yet)."""
        self._last = -math.inf

    def publish(self, now: float) -> None:
        """A publish queued events at ``now`` (the channel clock)."""
        gap, self._last = now - self._last, now
        self.count += 1
        if math.isinf(self.gap_s):
            self.gap_s = gap
        else:
            self.gap_s += SMOOTHING * (gap - self.gap_s)

    def worth_lingering(self, linger_s: float, count_at_push: int) -> bool:
        """Whether a linger of ``linger_s`` is expected to make a member's short push at
        least LINGER_GAIN fuller: the member got what is ready over the publishes since
        ``count_at_push`` (the count at its last push; at least one), and the linger is
        expected to span ``linger_s / gap_s`` more."""
        publishes = max(1, self.count - count_at_push)
        return linger_s > 0 and linger_s >= LINGER_GAIN * publishes * self.gap_s

    def filling_linger(
        self, ready: int, room: int, count_at_push: int, most_s: float, now: float
    ) -> float:
        """How long a member's short push (``ready`` events of the ``room`` it has) is
        expected to take to fill at the rate the member's events came since its last
        push, at most ``most_s``. 0 when:

        - no publish came since that push: what is ready was freed by acks (with 10,000
          partitions, partitions whose elders were in flight), not streamed in;
        - the push is more than two thirds full (FILL_SHORT);
        - publishes have stopped (QUIET_GAPS): a backlog draining, a retry after the last
          publish;
        - the wait is not expected to make it LINGER_GAIN fuller (:meth:`worth_lingering`).
        """
        publishes = self.count - count_at_push
        stopped = now - self._last > QUIET_GAPS * self.gap_s
        if publishes < 1 or ready * FILL_SHORT > room or stopped:
            return 0.0
        to_fill = publishes * self.gap_s * (room / max(1, ready) - 1)
        wait = min(most_s, to_fill)
        return wait if self.worth_lingering(wait, count_at_push) else 0.0
