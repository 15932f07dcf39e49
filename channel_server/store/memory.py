"""A store that keeps everything in memory: the backup of the in-memory queues survives
kill_queues, not a process crash. Selected with ``--memory``."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from channel_server.events import Event
from channel_server.store.base import ChannelRecord, MemberRecord, Store


class MemoryStore(Store):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        """Guards the three dicts below (channels may share one store)."""
        self._channels: dict[str, ChannelRecord] = {}
        self._events: dict[str, dict[int, Event]] = {}
        self._members: dict[tuple[str, str, str], MemberRecord] = {}

    def save_channel(self, record: ChannelRecord) -> None:
        with self._lock:
            self._channels.setdefault(record.name, record)
            self._events.setdefault(record.name, {})

    def channels(self) -> list[ChannelRecord]:
        with self._lock:
            return list(self._channels.values())

    def append(self, channel: str, events: Sequence[Event]) -> None:
        with self._lock:
            table = self._events.setdefault(channel, {})
            for ev in events:
                table[ev.offset] = ev

    def ack(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        """Nothing to do: retention is decided by the channel, which calls delete."""

    def delete(self, channel: str, offsets: Sequence[int]) -> None:
        with self._lock:
            table = self._events.get(channel, {})
            for offset in offsets:
                table.pop(offset, None)

    def unacked(self, channel: str) -> list[Event]:
        with self._lock:
            return sorted(self._events.get(channel, {}).values())

    def save_member(self, record: MemberRecord) -> None:
        with self._lock:
            self._members[(record.channel, record.group, record.member_id)] = record

    def remove_member(self, channel: str, group: str, member_id: str) -> None:
        with self._lock:
            self._members.pop((channel, group, member_id), None)

    def members(self, channel: str) -> list[MemberRecord]:
        with self._lock:
            return [r for r in self._members.values() if r.channel == channel]
