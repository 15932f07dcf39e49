"""What the parts of one channel share: its name, configuration, pure core and clock, and
the channel lock that guards them.

A channel is a facade (:mod:`channel_server.channel`) over parts that each own their own
state (push, pull, membership, acks, dead letters, backup, liveness, stats). They share
nothing else: each is given this state and the other parts it calls, by their public
methods. The lock order of the whole broker is in docs/architecture.md ("Threads and
locks").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore
from channel_server.core.histogram import STORE_BUCKETS_S, Histogram

MemberKey = tuple[str, str]
"""(group, member id): how the parts name a member."""


class MemberSession(NamedTuple):
    """A member as it reports back (acks, heartbeats): its id, group and session."""

    subscriber_id: str
    group: str
    session: int

    @property
    def key(self) -> MemberKey:
        return (self.group, self.subscriber_id)


@dataclass(eq=False)
class ChannelTimings:
    """What the channel times at its edges (guarded by the channel lock): each publish's
    store write, and how long its last restore took."""

    store_write: Histogram = field(default_factory=lambda: Histogram(STORE_BUCKETS_S))
    restore_s: float = 0.0


@dataclass(frozen=True, eq=False)
class ChannelState:
    """The channel's name, configuration, core and clock, and its lock."""

    name: str
    config: ChannelConfig
    core: ChannelCore
    now: Callable[[], float]
    """The clock (:func:`~channel_server.steady_clock.steady_time` but in tests); read
    under the lock, passed to the core."""
    # The channel lock: one mutex per channel, like CPython queue.Queue's.
    # Guards: the core (groups, members, partition queues, counters, dead letters, the
    #   dedupe window) and the state every part of this channel keeps (push scheduling
    #   and its table of links, liveness's connections, the backup's trim count, the
    #   rate samples, the facade's closed flag). Never the links themselves: a push or
    #   a ping runs outside it, under its MemberLink's own lock.
    # Taken by: Pyro5 worker threads in the exposed methods, dispatch-pool threads in
    #   push tasks and the housekeeping round; for bookkeeping, not for waiting. No RPC
    #   is made under it; the store is written under it (an accepted batch is committed
    #   before publish returns, measured faster than outside; a rebuild reloads it).
    # Order: the broker's lock is never held while taking it; under it a thread may
    #   take the store's locks and the dispatch pool's condition (they never call back),
    #   never another channel's lock or a MemberLink's lock.
    lock: threading.Lock = field(default_factory=threading.Lock)
    timings: ChannelTimings = field(default_factory=ChannelTimings)
