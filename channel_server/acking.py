"""What push members report back: acks of the events their handlers finished, and
heartbeats (DESIGN §6). :class:`Acking` keeps no state of its own: it applies a report to
the core under the channel lock, writes what it did, and notes the member's connection.

Acks come two ways: in an ``ack`` call, or in the reply to a push (the subscriber had
finished the events within the wait the push offered it), which saves a round trip and
two thread wake-ups on each side per push (docs/benchmarks.md, "Acks in the push's
reply").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from channel_server import boundary
from channel_server.backup import ChannelBackup
from channel_server.channel_state import ChannelState, MemberKey, MemberSession
from channel_server.core.acks import AckOutcome
from channel_server.core.group import ConsumerGroup
from channel_server.errors import InvalidArgument
from channel_server.liveness import Liveness
from channel_server.log_throttle import Throttle
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
        self._refused = Throttle(log)
        """Malformed acks in push replies: one line per 10 s, not one per push."""

    def ack(
        self,
        who: MemberSession,
        through_seq: int,
        acked: list[str],
        nacked: dict[str, str],
        from_seq: int = 0,
        returned: Sequence[str] = (),
    ) -> dict[str, Any]:
        """See EventChannel.ack (arguments checked already)."""
        with self._push.acking(who.key):
            stale = self._apply(who, from_seq, through_seq, acked, nacked, returned)
        return {"status": "stale" if stale else "ok"}

    def answered(self, key: MemberKey, session: int, answer: Any) -> None:
        """The acks a member put in its reply to a push of ``session`` (see
        :mod:`~channel_server.push`); malformed ones are logged and dropped (the events
        they would name are redelivered after the ack timeout)."""
        try:
            checked = boundary.check_answer(answer, self._state.config.max_prefetch)
        except InvalidArgument as exc:
            name = self._state.name
            self._refused.warning("answer", "%s: %s's push reply: %s", name, key[1], exc)
            return
        from_seq, through_seq, acked, nacked, returned = checked
        who = MemberSession(key[1], key[0], session)
        self._apply(who, from_seq, through_seq, acked, nacked, returned)

    def _apply(
        self,
        who: MemberSession,
        from_seq: int,
        through_seq: int,
        acked: list[str],
        nacked: dict[str, str],
        returned: Sequence[str],
    ) -> bool:
        """Apply an ack message of a push member; whether its session was over."""
        with self._state.lock:
            grp = self._members.acting(who.group, who.subscriber_id)
            if grp is None:
                return True
            now = self._state.now()
            outcome = self.settle(grp, who, through_seq, acked, nacked, now, from_seq, returned)
            if not outcome.stale:
                self._liveness.note(who.key)
                self._push.acknowledged(who.key)
            self._push.changed()
        self._outcomes.log_ack(who.subscriber_id, outcome)
        return outcome.stale

    def settle(
        self,
        grp: ConsumerGroup,
        who: MemberSession,
        through_seq: int,
        acked: list[str],
        nacked: dict[str, str],
        now: float,
        from_seq: int = 0,
        returned: Iterable[str] = (),
    ) -> AckOutcome:
        """Apply an ack to the core and write what it did (under the channel lock): a push
        member's ack, or the last message a pull member names in its next ``get``."""
        outcome, retired = self._state.core.acknowledge(
            grp, who.subscriber_id, who.session, acked, nacked, through_seq, now, from_seq, returned
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
