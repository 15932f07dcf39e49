"""What a channel does with what its core reports, under the channel lock.

The core is pure: it notes what happened (members made inactive, partitions offloaded or
given new owners, members that may have work) and returns outcomes (events acknowledged,
dead-lettered, retired). This part logs them and writes them to the backup; waking the
members that may have work is the push side's (:meth:`PushDelivery.changed`).
"""

from __future__ import annotations

import logging

from channel_server.backup import ChannelBackup
from channel_server.channel_state import ChannelState, MemberKey
from channel_server.core import rebalance
from channel_server.core.group import AckOutcome, ConsumerGroup

log = logging.getLogger("channel_server.channel")


class Outcomes:
    """Notices and outcomes of the core, logged and persisted; no state of its own."""

    def __init__(self, state: ChannelState, backup: ChannelBackup) -> None:
        self._state = state
        self._backup = backup

    def notices(self) -> list[MemberKey]:
        """Log what the groups noted since the last call and persist ownership changes;
        returns the members that may have work now (the push side wakes them)."""
        name = self._state.name
        touched: list[MemberKey] = []
        for grp in self._state.core.groups.values():
            for member_id, reason in grp.deactivations:
                log.warning("%s: %s marked inactive (%s)", name, member_id, reason)
            grp.deactivations.clear()
            for member_id, moved, why in grp.offloads:
                log.log(
                    logging.WARNING if why == rebalance.SLOW else logging.INFO,
                    "%s: moved %d queued partitions of %s %s to others",
                    name,
                    moved,
                    why,
                    member_id,
                )
            grp.offloads.clear()
            changes = grp.take_owner_changes()
            if changes.owners:
                self._backup.owners(grp.name, changes.owners, changes.opened)
            touched.extend((grp.name, member_id) for member_id in grp.touched)
            grp.touched.clear()
        return touched

    def bury(
        self, grp: ConsumerGroup, member_id: str, session: int, seqs: range, faults: dict[str, str]
    ) -> None:
        """A delivery to the member (its ``seqs``) holds events that cannot cross the wire,
        or that killed the subscribers taking them (uid -> why). They go to the
        dead-letter queue, not counted against the member; the rest of the delivery goes
        back to be sent again."""
        outcome, retired = self._state.core.bury_unpushable(grp, member_id, session, seqs, faults)
        self._backup.outcome(grp.name, outcome, retired)
        for ev, error in outcome.dead:
            log.warning("%s: %s dead-lettered: %s", self._state.name, ev.id, error)

    def log_ack(self, member_id: str, outcome: AckOutcome) -> None:
        """Say what an ack message did that an operator should know (outside the lock)."""
        name = self._state.name
        if outcome.missing:
            log.warning(
                "%s: %s skipped the acks of %d events; they will be redelivered",
                name,
                member_id,
                outcome.missing,
            )
        for ev, error in outcome.dead:
            log.warning(
                "%s: %s dead-lettered after %d failures: %s",
                name,
                ev.id,
                self._state.config.max_attempts,
                error,
            )
