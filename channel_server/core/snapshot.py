"""What a store gives back for one channel: the records a restart or a rebuild restores.

They live in the core, which consumes them (:meth:`ChannelCore.restore` and
:meth:`ChannelCore.rebuild`), so the core needs nothing from :mod:`channel_server.store`;
the store contract (:mod:`channel_server.store.base`) imports them from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from channel_server.events import Event, PartitionKey


@dataclass(frozen=True)
class MemberRecord:
    channel: str
    group: str
    member_id: str
    callback: str
    prefetch: int
    user: str = "owner"
    """Who owns the subscriber id."""
    secret: str = ""
    """What the broker presents to the callback daemon (kept so a restart can push)."""


@dataclass(frozen=True)
class DeadLetterRecord:
    group: str
    event: Event
    error: str


@dataclass
class ChannelSnapshot:
    """What a store holds for one channel."""

    next_offset: int = 0
    groups: dict[str, int] = field(default_factory=dict)
    """group -> the channel's next offset when it was created (it sees events from there)."""
    members: list[MemberRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    """Not yet acknowledged by every group, in ``(timestamp, offset)`` order."""
    acks: dict[str, set[int]] = field(default_factory=dict)
    """group -> offsets among ``events`` it has acknowledged."""
    delivered: list[tuple[str, str, float]] = field(default_factory=list)
    """The delivered-ID window, oldest first: (publisher id, id, accepted at); the
    publisher id is "" for ids a store from before id scopes kept."""
    dead_letters: list[DeadLetterRecord] = field(default_factory=list)
    owners: dict[str, dict[PartitionKey, str]] = field(default_factory=dict)
    """group -> partition -> owning member, as last saved."""
