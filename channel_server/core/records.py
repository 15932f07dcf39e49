"""What a channel's operations return and keep: its kind, a publish's outcome, a member
removed, a publisher's outstanding work and a dead letter (pure records)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from channel_server.events import Event


class ChannelKind(StrEnum):
    QUEUE = "queue"
    TOPIC = "topic"


@dataclass
class PublishOutcome:
    """What happened to a published batch, in batch order."""

    accepted: list[Event] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Ids refused for capacity."""
    full_by: str = "events"
    """The limit that refused them: "events" (``capacity``), "bytes"
    (``max_queued_bytes``) or "partitions" (``max_partition_queues``)."""
    unrouted: int = 0
    """Events of a topic with no group: reported, not stored."""

    def summary(self) -> dict[str, Any]:
        return {
            "accepted": len(self.accepted),
            "duplicates": self.duplicates,
            "refused": len(self.refused),
            "unrouted": self.unrouted,
        }


@dataclass(frozen=True)
class Forgotten:
    """A member an operator removed (see :meth:`ChannelCore.forget_member`)."""

    group: str
    member_id: str
    was_active: bool
    inactive_reason: str
    partitions: int
    """Partitions it owned (they went to the others)."""
    in_flight: int
    """Events it held (they went back to be delivered again)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Outstanding:
    """One publisher's work a channel still owes (see :meth:`ChannelCore.outstanding`)."""

    queued: int = 0
    in_flight: int = 0
    dead_letters: int = 0
    """Its events in the dead-letter queue: given up on, so not outstanding."""
    unserved: dict[str, int] = field(default_factory=dict)
    """Groups holding some of the queued ones with no active member to take them (group
    -> how many): each group gets every event, so those wait for a member of theirs."""

    @property
    def total(self) -> int:
        return self.queued + self.in_flight

    def to_dict(self) -> dict[str, Any]:
        return {
            "outstanding": self.total,
            "queued": self.queued,
            "in_flight": self.in_flight,
            "dead_letters": self.dead_letters,
            "unserved": dict(self.unserved),
        }


@dataclass(frozen=True)
class DeadLetter:
    event: Event
    group: str
    error: str
