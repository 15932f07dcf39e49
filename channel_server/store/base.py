"""The store contract every backup queue implements (DESIGN §7).

The channel calls it under its own lock, in this order: ``append`` before a publish
returns, ``ack`` when a group acknowledges, ``delete`` when every group has. ``unacked``
is what a rebuild (kill_queues, restart) reads back, in ``(timestamp, offset)`` order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from channel_server.events import Event


@dataclass(frozen=True)
class ChannelRecord:
    name: str
    kind: str


@dataclass(frozen=True)
class MemberRecord:
    channel: str
    group: str
    member_id: str
    callback: str
    prefetch: int


class Store(ABC):
    """Durable (or not) home of channels, members and unacknowledged events."""

    @abstractmethod
    def save_channel(self, record: ChannelRecord) -> None:
        """Remember a channel so a restart recreates it (idempotent)."""

    @abstractmethod
    def channels(self) -> list[ChannelRecord]:
        """Every channel saved, in creation order."""

    @abstractmethod
    def append(self, channel: str, events: Sequence[Event]) -> None:
        """Store one accepted publish batch atomically (one transaction: group commit)."""

    @abstractmethod
    def ack(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        """Record that one group acknowledged these events."""

    @abstractmethod
    def delete(self, channel: str, offsets: Sequence[int]) -> None:
        """Forget events every group has acknowledged (retention, DESIGN §4)."""

    @abstractmethod
    def unacked(self, channel: str) -> list[Event]:
        """Events accepted and not yet deleted, in ``(timestamp, offset)`` order."""

    @abstractmethod
    def save_member(self, record: MemberRecord) -> None:
        """Remember a subscription (callback URI included) so a restart resumes pushing."""

    @abstractmethod
    def remove_member(self, channel: str, group: str, member_id: str) -> None:
        """Forget a subscription that ended with unsubscribe."""

    @abstractmethod
    def members(self, channel: str) -> list[MemberRecord]:
        """Every saved subscription of a channel."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release files and connections; the default has none."""

    @staticmethod
    def offsets(events: Iterable[Event]) -> list[int]:
        return [ev.offset for ev in events]
