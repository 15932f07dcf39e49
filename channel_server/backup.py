"""How a channel writes its backup queue (DESIGN §7): what changed, in store terms.

Called under the channel's lock; the store has its own lock and never calls back.
"""

from __future__ import annotations

import logging

from channel_server.core.acks import AckOutcome
from channel_server.core.channel_core import ChannelCore
from channel_server.events import Event, PartitionKey
from channel_server.store.base import DeadLetterRecord, Store

log = logging.getLogger("channel_server.channel")


class ChannelBackup:
    def __init__(self, name: str, store: Store, core: ChannelCore) -> None:
        self._name = name
        self.store = store
        self._core = core
        self._trimmed = 0
        """Delivered ids already trimmed from the store's window."""

    def restored(self) -> None:
        """After a restore: the window the store kept is trimmed already."""
        self._trimmed = self._core.delivered.expired_total

    def accept(self, events: list[Event], now: float) -> None:
        """Commit an accepted batch (one transaction) before ``publish`` returns."""
        self.store.append(self._name, events, self._core.next_offset, now)

    def outcome(self, group: str, outcome: AckOutcome, retired: list[Event]) -> None:
        """What an ack did: dead letters, acks of one group, deletes of retired events."""
        if outcome.dead:
            letters = [DeadLetterRecord(group, ev, error) for ev, error in outcome.dead]
            self.store.add_dead_letters(self._name, letters)
        gone = {ev.offset for ev in retired}
        kept = [ev.offset for ev in outcome.done if ev.offset not in gone]
        if kept:
            self.store.ack(self._name, group, kept)
        if gone:
            self.store.delete(self._name, sorted(gone))

    def owners(self, group: str, changes: dict[PartitionKey, str | None]) -> None:
        self.store.save_owners(self._name, group, changes)

    def trim(self) -> None:
        """Forget in the store the delivered ids the window forgot."""
        expired = self._core.delivered.expired_total - self._trimmed
        if expired:
            self.store.trim_delivered(self._name, expired)
            self._trimmed += expired

    def repair(self) -> bool:
        """The invariant of DESIGN §7: accepted - acknowledged = queued + in flight. When
        it breaks (kill_queues), rebuild the queues from the backup. True if it did."""
        lost = self._core.lost()
        if not lost:
            return False
        log.warning(
            "%s: the queues lost %d events (accepted - acknowledged != queued + "
            "in flight): publishing halted, rebuilding from the backup",
            self._name,
            lost,
        )
        refilled = self._core.rebuild(self.store.load(self._name))
        log.warning(
            "%s: rebuilt %d events in timestamp order; publishing resumed", self._name, refilled
        )
        for grp in self._core.groups.values():
            grp.touched.update(grp.members)
        return True
