"""A store in memory: a backup of the queues that survives kill_queues, not the process.

Selected with ``--memory``. It keeps no delivered-ID window (the channel has it in memory
already, and nothing of this store outlives the process that could read it back).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from channel_server.core.queues import DELIVERY_ORDER
from channel_server.events import Event, PartitionKey
from channel_server.store.base import (
    SESSIONS_PER_LIFE,
    ChannelRecord,
    ChannelSnapshot,
    DeadLetterRecord,
    MemberRecord,
    Store,
)


class _ChannelData:
    def __init__(self) -> None:
        self.next_offset = 0
        self.groups: dict[str, int] = {}
        self.events: dict[int, Event] = {}
        self.acks: dict[str, set[int]] = {}
        self.members: dict[tuple[str, str], MemberRecord] = {}
        self.dead: dict[tuple[str, int], DeadLetterRecord] = {}
        self.owners: dict[str, dict[PartitionKey, str]] = {}


class MemoryStore(Store):
    durable = False

    def __init__(self) -> None:
        # Guards _channels and every _ChannelData in it (channels share one store). A
        #   leaf, taken under a channel lock; it plays the SQLite store's _lock.
        self._lock = threading.Lock()
        self._channels: dict[str, ChannelRecord] = {}
        self._data: dict[str, _ChannelData] = {}
        self._sessions: dict[str, int] = {}
        """channel -> the session numbers its lives in this process claimed end here"""

    def _of(self, channel: str) -> _ChannelData:
        return self._data.setdefault(channel, _ChannelData())

    def claim_sessions(self, channel: str, at_least: int) -> int:
        with self._lock:
            first = max(at_least, self._sessions.get(channel, 0))
            self._sessions[channel] = first + SESSIONS_PER_LIFE
        return first

    def save_channel(self, record: ChannelRecord) -> None:
        with self._lock:
            self._channels.setdefault(record.name, record)
            self._of(record.name)

    def channels(self) -> list[ChannelRecord]:
        with self._lock:
            return list(self._channels.values())

    def remove_channel(self, channel: str) -> None:
        with self._lock:
            self._channels.pop(channel, None)
            self._data.pop(channel, None)

    def save_group(self, channel: str, group: str, created_offset: int) -> None:
        with self._lock:
            self._of(channel).groups.setdefault(group, created_offset)

    def remove_group(self, channel: str, group: str) -> None:
        with self._lock:
            data = self._of(channel)
            data.groups.pop(group, None)
            data.acks.pop(group, None)
            data.owners.pop(group, None)
            data.dead = {k: v for k, v in data.dead.items() if k[0] != group}

    def append(
        self, channel: str, events: Sequence[Event], next_offset: int, accepted_at: float
    ) -> None:
        with self._lock:
            data = self._of(channel)
            data.events.update((ev.offset, ev) for ev in events)
            data.next_offset = max(data.next_offset, next_offset)

    def payloads(self, channel: str, offsets: Sequence[int]) -> dict[int, Any]:
        with self._lock:
            events = self._of(channel).events
            return {o: events[o].payload for o in offsets if o in events}

    def reinsert(self, channel: str, events: Sequence[Event], accepted_at: float) -> None:
        with self._lock:
            self._of(channel).events.update((ev.offset, ev) for ev in events)

    def ack(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        with self._lock:
            self._of(channel).acks.setdefault(group, set()).update(offsets)

    def delete(self, channel: str, offsets: Sequence[int]) -> None:
        with self._lock:
            data = self._of(channel)
            for offset in offsets:
                data.events.pop(offset, None)
            for acked in data.acks.values():
                acked.difference_update(offsets)

    def trim_delivered(self, channel: str, count: int) -> None:
        """Nothing to trim: this store keeps no delivered window."""

    def save_member(self, record: MemberRecord) -> None:
        with self._lock:
            self._of(record.channel).members[(record.group, record.member_id)] = record

    def remove_member(self, channel: str, group: str, member_id: str) -> None:
        with self._lock:
            self._of(channel).members.pop((group, member_id), None)

    def save_owners(
        self,
        channel: str,
        group: str,
        changes: dict[PartitionKey, str | None],
        *,
        opened: bool = False,
    ) -> None:
        with self._lock:
            owners = self._of(channel).owners.setdefault(group, {})
            for key, owner in changes.items():
                if owner is None:
                    owners.pop(key, None)
                else:
                    owners[key] = owner

    def add_dead_letters(self, channel: str, letters: Sequence[DeadLetterRecord]) -> None:
        with self._lock:
            dead = self._of(channel).dead
            dead.update(((d.group, d.event.offset), d) for d in letters)

    def remove_dead_letters(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        with self._lock:
            dead = self._of(channel).dead
            for offset in offsets:
                dead.pop((group, offset), None)

    def load(self, channel: str, payload_budget: int | None = None) -> ChannelSnapshot:
        """Every payload, whatever the budget: they are all in memory anyway."""
        with self._lock:
            data = self._of(channel)
            return ChannelSnapshot(
                next_offset=data.next_offset,
                groups=dict(data.groups),
                members=list(data.members.values()),
                events=sorted(data.events.values(), key=DELIVERY_ORDER),
                acks={g: set(a) for g, a in data.acks.items()},
                dead_letters=list(data.dead.values()),
                owners={g: dict(o) for g, o in data.owners.items()},
            )

    def count(self, channel: str) -> int:
        with self._lock:
            return len(self._of(channel).events)
