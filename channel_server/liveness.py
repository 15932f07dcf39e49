"""Signs of life of a channel's members, judged under the channel lock (DESIGN §6).

Two sources: the client connection each push member speaks through (when it closes, a
crashed subscriber, its members are pinged at once), and the broker's housekeeping round
(pings of silent members holding events, handler and pull timeouts, idle partitions).
"""

from __future__ import annotations

import logging

from Pyro5.callcontext import current_context

from channel_server.channel_state import ChannelState, MemberKey
from channel_server.core import health, rebalance
from channel_server.push import PushDelivery

log = logging.getLogger("channel_server.channel")


class Liveness:
    """Judges who is alive; owns the table of connections push members spoke through."""

    def __init__(self, state: ChannelState, push: PushDelivery) -> None:
        self._core = state.core
        self._config = state.config
        self._push = push
        self._connections: dict[int, set[MemberKey]] = {}
        """id of a client connection -> the push members that spoke through it."""

    def note(self, key: MemberKey) -> None:
        """Remember the connection the current RPC came through (none in-process)."""
        conn = current_context.client
        if conn is not None:
            self._connections.setdefault(id(conn), set()).add(key)

    def closed(self, conn_id: int) -> None:
        """A client connection closed: ping the push members that spoke through it now,
        instead of waiting for them to fall silent."""
        for key in self._connections.pop(conn_id, ()):
            member = self._core.member(*key)
            if member is not None and member.active and not member.pull:
                self._push.probe(key)

    def round(self, now: float) -> None:
        """Time out stuck handlers and quiet pull members, ping silent members holding
        events, drop idle partitions, expire the dedupe window."""
        cfg = self._config
        for grp in self._core.groups.values():
            for member_id in health.stuck(grp, now, cfg.handler_timeout_s):
                grp.deactivate(member_id, f"held an event over {cfg.handler_timeout_s:g} s")
            for member_id in health.idle_pullers(grp, now, cfg.pull_timeout_s):
                grp.deactivate(member_id, f"no get for {cfg.pull_timeout_s:g} s")
            if health.stalled(grp, now):
                rebalance.around_stalls(grp)
            for member_id in health.silent(grp, now, cfg.ack_timeout_s):
                self._push.probe((grp.name, member_id))
            for key in grp.sweep_idle(now, cfg.partition_idle_s):
                log.debug("%s: dropped idle partition %s", self._core.name, key)
        self._core.delivered.expire(now)
