"""How a channel writes its backup queue (DESIGN §7): what changed, in store terms.

Every store write of a channel goes through here, under the channel lock; the store has
its own locks and never calls back. ``repair`` is where the channel notices, by its
invariant, that its in-memory queues lost events, and rebuilds them from the store.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from channel_server.channel_state import ChannelState
from channel_server.core.acks import AckOutcome
from channel_server.core.records import DeadLetter
from channel_server.events import Event, PartitionKey
from channel_server.store.base import ChannelSnapshot, DeadLetterRecord, MemberRecord, Store

log = logging.getLogger("channel_server.channel")


class ChannelBackup:
    """The channel's side of its store: the writes, the reload and the invariant."""

    def __init__(self, state: ChannelState, store: Store) -> None:
        self._state = state
        self._name = state.name
        self.store = store
        self._trimmed = 0
        """Delivered ids already trimmed from the store's window."""

    # -- a restart -----------------------------------------------------------------------
    def load(self) -> ChannelSnapshot:
        """What the store kept, read without the lock (a restart may read millions)."""
        with _no_gc():  # millions of new objects: no collections until they are all in place
            return self.store.load(self._name, self._payload_budget())

    def claim_sessions(self) -> int:
        """This life's first session, from the store (see Store.claim_sessions): at least
        the clock's seed the core began with. Read without the lock, before any session is
        given out."""
        return self.store.claim_sessions(self._name, self._state.core.next_session)

    def restore(self, snapshot: ChannelSnapshot) -> None:
        """Under the lock: put what the store kept into the core, and its groups back in
        the store (a restored group keeps the offset it was created at)."""
        core = self._state.core
        with _no_gc():
            core.restore(snapshot, self._state.now())
        self._trimmed = core.delivered.expired_total  # the window the store kept is trimmed
        for grp in core.groups.values():
            self.store.save_group(self._name, grp.name, grp.created_offset)

    def _payload_budget(self) -> int | None:
        """Bytes of a backlog read back with their payloads (all of them from the memory
        store, which keeps them anyway)."""
        return self._state.config.payload_memory_bytes if self.store.durable else None

    # -- writes, under the lock ----------------------------------------------------------
    def accept(self, events: list[Event], now: float) -> None:
        """Commit an accepted batch (one transaction) before ``publish`` returns."""
        started = time.perf_counter()
        self.store.append(self._name, events, self._state.core.next_offset, now)
        self._state.timings.store_write.observe(time.perf_counter() - started)

    def outcome(self, group: str, outcome: AckOutcome, retired: list[Event]) -> None:
        """What an ack did: dead letters, acks of one group, deletes of retired events."""
        if outcome.dead:
            letters = [DeadLetterRecord(group, ev, error) for ev, error in outcome.dead]
            self.store.add_dead_letters(self._name, letters)
            self._drop_letters()
        gone = {ev.offset for ev in retired}
        kept = [ev.offset for ev in outcome.done if ev.offset not in gone]
        if kept:
            self.store.ack(self._name, group, kept)
        if gone:
            self.store.delete(self._name, sorted(gone))

    def _drop_letters(self) -> None:
        """Remove from the store the dead letters the core dropped over their caps."""
        core = self._state.core
        dropped, core.letters_dropped = core.letters_dropped, []
        if not dropped:
            return
        by_group: dict[str, list[int]] = {}
        for letter in dropped:
            by_group.setdefault(letter.group, []).append(letter.event.offset)
        for group, offsets in by_group.items():
            self.store.remove_dead_letters(self._name, group, offsets)
        config = self._state.config
        log.warning(
            "%s: dropped the %d oldest dead letters (%s first): over --max-dead-letters %d "
            "or --max-dead-letter-bytes %d",
            self._name,
            len(dropped),
            dropped[0].event.uid,
            config.max_dead_letters,
            config.max_dead_letter_bytes,
        )

    def owners(
        self, group: str, changes: dict[PartitionKey, str | None], opened: bool = False
    ) -> None:
        self.store.save_owners(self._name, group, changes, opened=opened)

    def group_added(self, group: str, created_offset: int) -> None:
        self.store.save_group(self._name, group, created_offset)

    def group_dropped(self, group: str, gone: list[Event]) -> None:
        """A group went with its last member; ``gone``: the events no group holds now."""
        self.store.remove_group(self._name, group)
        if gone:
            self.store.delete(self._name, self.store.offsets(gone))

    def member_saved(self, record: MemberRecord) -> None:
        self.store.save_member(record)

    def member_removed(self, group: str, member_id: str) -> None:
        self.store.remove_member(self._name, group, member_id)

    def replayed(self, letters: list[DeadLetter], restored: list[Event], now: float) -> None:
        """Dead letters queued again; ``restored``: those no group held, stored again."""
        if restored:
            self._acked_elsewhere(letters, restored)
            self.store.reinsert(self._name, restored, now)
        for letter in letters:
            self.store.remove_dead_letters(self._name, letter.group, [letter.event.offset])

    def _acked_elsewhere(self, letters: list[DeadLetter], restored: list[Event]) -> None:
        """Record, before a retired event is stored again, that every group it was
        published to but is not replayed to is done with it: its acks went with its row,
        and a restart gave it to them all again (session 34's Jepsen probe: a topic's
        reader got a message twice). The pending delete of its row (and acks) goes first."""
        self.store.write_deferred_now()
        for group, events in self._state.core.done_elsewhere(letters, restored).items():
            self.store.ack(self._name, group, self.store.offsets(events))

    def trim(self) -> None:
        """Forget in the store the delivered ids the window forgot."""
        expired = self._state.core.delivered.expired_total - self._trimmed
        if expired:
            self.store.trim_delivered(self._name, expired)
            self._trimmed += expired

    # -- the invariant -------------------------------------------------------------------
    def repair(self) -> bool:
        """The invariant of DESIGN §7: accepted - acknowledged = queued + in flight, read
        from counters (O(groups)). When it breaks (kill_queues), rebuild the queues from
        the backup and mark every member as maybe having work. True if it did."""
        core = self._state.core
        lost = core.lost()
        if not lost:
            return False
        log.warning(
            "%s: the queues lost %d events (accepted - acknowledged != queued + "
            "in flight): publishing halted, rebuilding from the backup",
            self._name,
            lost,
        )
        refilled = core.rebuild(self.store.load(self._name, self._payload_budget()))
        log.warning(
            "%s: rebuilt %d events in timestamp order; publishing resumed", self._name, refilled
        )
        for grp in core.groups.values():
            grp.touched.update(grp.members)
        return True

    def check(self) -> None:
        """Under the lock: the invariant in full, for tests and debugging. Each group's
        queue counter must equal a count of its queues, and what it holds must be in
        them; raises AssertionError naming the group otherwise."""
        for grp in self._state.core.groups.values():
            counted = grp.counted_backlog()
            if not grp.held == grp.backlog == counted:
                raise AssertionError(
                    f"{self._name}/{grp.name}: holds {grp.held} events, its counter says "
                    f"{grp.backlog} are queued or in flight, its queues have {counted}"
                )


@contextmanager
def _no_gc() -> Iterator[None]:
    """No garbage collection inside (restoring creates millions of objects at once)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
