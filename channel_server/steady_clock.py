"""The channel's clock: the wall clock's time without its steps.

A channel keeps its deadlines in this clock: acks due, push retries, heartbeats, idle
partitions, the delivered window's age. The wall clock can be stepped (NTP, a VM restored
from a snapshot, an operator). Set back an hour, every deadline would wait an hour longer
(a crashed subscriber's events stuck where they are); set forward, every member would look
silent at once and the delivered window would forget every id it should still know (a
publisher's retry accepted a second time). This clock reads the wall clock once, when the
broker starts, and runs with the monotonic clock from there. What a life stores for the
next (``accepted_at``) still compares across lives as wall-clock times do: each life
starts from the wall clock again.
"""

from __future__ import annotations

import time

_WALL_AT_ZERO = time.time() - time.monotonic()
"""The wall clock's reading, less the monotonic clock's, when this process started."""


def steady_time() -> float:
    """Seconds since the epoch as the wall clock read them at start, counted on since
    by the monotonic clock."""
    return _WALL_AT_ZERO + time.monotonic()
