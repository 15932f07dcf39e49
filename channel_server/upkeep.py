"""The broker's side of one channel: restore it, run its housekeeping round, fire the
fault, close it. :class:`Upkeep` owns whether the channel is closed (under the lock).
"""

from __future__ import annotations

import logging
import time

from channel_server.backup import ChannelBackup
from channel_server.channel_state import ChannelState
from channel_server.channel_stats import ChannelStats
from channel_server.liveness import Liveness
from channel_server.membership import Membership
from channel_server.push import PushDelivery

log = logging.getLogger("channel_server.channel")


class Upkeep:
    """What the broker does to a channel, as opposed to what its clients ask."""

    def __init__(
        self,
        state: ChannelState,
        backup: ChannelBackup,
        members: Membership,
        push: PushDelivery,
        liveness: Liveness,
        stats: ChannelStats,
    ) -> None:
        self._state = state
        self._backup = backup
        self._members = members
        self._push = push
        self._liveness = liveness
        self._stats = stats
        self._closed = False
        """Set by ``close``: no housekeeping round runs after it."""

    def restore(self) -> int:
        """See EventChannel.restore. The store is read outside the lock."""
        started = time.perf_counter()
        snapshot = self._backup.load()
        first_session = self._backup.claim_sessions()
        with self._state.lock:
            self._state.core.start_sessions_at(first_session)
            self._backup.restore(snapshot)
            self._members.resume()
            self._push.changed()
            self._state.timings.restore_s = time.perf_counter() - started
        if snapshot.events or snapshot.members:
            log.info(
                "%s: restored %d unacknowledged events, %d members, %d dead letters",
                self._state.name,
                len(snapshot.events),
                len(snapshot.members),
                len(snapshot.dead_letters),
            )
        return len(snapshot.events)

    def round(self) -> None:
        """See EventChannel.housekeep."""
        with self._state.lock:
            if self._closed:
                return
            now = self._state.now()
            self._backup.repair()
            self._liveness.round(now)
            self._members.expire(now)
            self._members.drop_revoked()
            self._backup.trim()
            self._stats.sample(now)
            self._push.changed()

    def connection_closed(self, conn_id: int) -> None:
        with self._state.lock:
            self._liveness.closed(conn_id)

    def kill_queues(self) -> int:
        """See EventChannel.kill_queues."""
        with self._state.lock:
            dropped = self._state.core.kill_queues()
        log.warning(
            "%s: fault kill_queues fired: %d queued events dropped from memory",
            self._state.name,
            dropped,
        )
        return dropped

    def check_invariant(self) -> None:
        with self._state.lock:
            self._backup.check()

    def close(self) -> None:
        """Stop housekeeping and pushing; the links are closed outside the lock."""
        with self._state.lock:
            self._closed = True
            links = self._push.detach()
        for link in links:
            link.close()
