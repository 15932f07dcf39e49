"""What push members report back: acks of the events their handlers finished, and
heartbeats (DESIGN §6). :class:`Acking` keeps no state of its own: it applies a report to
the core under the channel lock, writes what it did, and notes the member's connection.
"""

from __future__ import annotations

import logging
from typing import Any

from channel_server.backup import ChannelBackup
from channel_server.channel_state import ChannelState, MemberSession
from channel_server.core.acks import AckOutcome
from channel_server.core.group import ConsumerGroup
from channel_server.liveness import Liveness
from channel_server.membership import Membership
from channel_server.outcomes import Outcomes
from channel_server.push import PushDelivery

log = logging.getLogger("channel_server.channel")


class Acking:
    """Applies acks and heartbeats of push members."""

    def __init__(
        self,
        state: ChannelState,
        backup: ChannelBackup,
        outcomes: Outcomes,
        members: Membership,
        push: PushDelivery,
        liveness: Liveness,
    ) -> None:
        self._state = state
        self._backup = backup
        self._outcomes = outcomes
        self._members = members
        self._push = push
        self._liveness = liveness

    def ack(
        self, who: MemberSession, through_seq: int, acked: list[str], nacked: dict[str, str]
    ) -> dict[str, Any]:
        """See EventChannel.ack (arguments checked already)."""
        with self._state.lock, self._push.acking(who.key):
            grp = self._members.acting(who.group, who.subscriber_id)
            if grp is None:
                return {"status": "stale"}
            outcome = self.settle(grp, who, through_seq, acked, nacked, self._state.now())
            if not outcome.stale:
                self._liveness.note(who.key)
                self._push.acknowledged(who.key)
            self._push.changed()
        self._outcomes.log_ack(who.subscriber_id, outcome)
        return {"status": "stale" if outcome.stale else "ok"}

    def settle(
        self,
        grp: ConsumerGroup,
        who: MemberSession,
        through_seq: int,
        acked: list[str],
        nacked: dict[str, str],
        now: float,
    ) -> AckOutcome:
        """Apply an ack to the core and write what it did (under the channel lock): a push
        member's ack, or the last message a pull member names in its next ``get``."""
        outcome, retired = self._state.core.acknowledge(
            grp, who.subscriber_id, who.session, acked, nacked, through_seq, now
        )
        self._backup.outcome(grp.name, outcome, retired)
        return outcome

    def heartbeat(self, who: MemberSession, holding: int | None) -> dict[str, Any]:
        """See EventChannel.heartbeat (arguments checked already)."""
        with self._state.lock:
            grp = self._members.acting(who.group, who.subscriber_id)
            if grp is None:
                return {"status": "unknown"}
            member = grp.heartbeat(who.subscriber_id, self._state.now())
            if member is None:
                return {"status": "unknown"}
            self._liveness.note(who.key)
            if not member.active:
                return {"status": "inactive", "reason": member.inactive_reason}
            if member.session != who.session:
                return {"status": "moved", "session": member.session, "callback": member.callback}
            if holding == 0 and member.flights:
                self._reclaim(grp, who.subscriber_id)
        return {"status": "active"}

    def _reclaim(self, grp: ConsumerGroup, subscriber_id: str) -> None:
        """The member holds none of what it was given before the last ack timeout."""
        lost = grp.reclaim(subscriber_id, self._state.now() - self._state.config.ack_timeout_s)
        if lost:
            log.warning(
                "%s: %s holds none of %d events it was given; they are delivered again",
                self._state.name,
                subscriber_id,
                lost,
            )
            self._push.changed()
