"""The store contract every backup queue implements (DESIGN §7).

The channel calls ``append`` (one transaction per publish batch: group commit) before
``publish`` returns; ``ack`` when one group of several acknowledged events; ``delete`` when
every group has; the dead-letter calls when a poison event gives up or is replayed.
``load`` reads back everything a restart or a rebuild (kill_queues) needs, as a
:class:`~channel_server.core.snapshot.ChannelSnapshot` (the core consumes it, so it and its
records live there; they are importable from here too).

Deferred writes: ``ack``, ``delete`` and ``trim_delivered`` may be written a moment later
(the SQLite store batches them in the background). Losing them in a crash is safe: the
events come back to the member owning their partition, whose processed-ID window
acknowledges them without calling the handler. So no ownership change may be written
ahead of them: a partition moves once its owner has acknowledged what it held, and if
that move outlived the acks, the events would come back to the new owner, which would
process them again. ``save_owners`` (unless it only gives partitions just opened their
first owner), ``remove_member``, ``remove_group``, ``load``, ``reinsert`` and ``close``
apply whatever is deferred first, and ``count`` leaves out the deletes still deferred, so
a reader never sees them missing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from channel_server.core.snapshot import ChannelSnapshot, DeadLetterRecord, MemberRecord
from channel_server.events import Event, IdScope, PartitionKey


@dataclass(frozen=True)
class ChannelRecord:
    name: str
    kind: str
    id_scope: str = IdScope.PUBLISHER.value
    """Where its event ids must be unique; a channel saved by a store from before id
    scopes existed reads back as ``channel`` (what its delivered window holds)."""


SESSIONS_PER_LIFE = 1 << 32
"""Session numbers one life of a channel claims (:meth:`Store.claim_sessions`): a new one
per subscribe, so a life would need four billion subscribes to run out."""
SESSIONS_KEY = "sessions claimed by "
"""The SQL stores' ``meta`` key of a channel (its name follows): where the numbers its
lives claimed end. (A file or database an older broker wrote has none; an older broker
passes it by.)"""


class Store(ABC):
    """Home of channels, groups, members, unacknowledged events and dead letters."""

    durable: bool = False
    """Whether what is written survives the process (and so a restart restores it)."""

    @abstractmethod
    def claim_sessions(self, channel: str, at_least: int) -> int:
        """The first of SESSIONS_PER_LIFE session numbers for a new life of ``channel``:
        ``at_least`` (the clock), or past the numbers its earlier lives on this store
        claimed if that is more; claimed durably before it returns. A subscriber refuses
        pushes of a session older than one it saw, so a life's numbers must exceed every
        earlier life's, whatever the clocks of the brokers (set back, or another machine's)
        say."""

    @abstractmethod
    def save_channel(self, record: ChannelRecord) -> None:
        """Remember a channel so a restart recreates it (idempotent: the first record of a
        name stays, its kind and id scope with it)."""

    @abstractmethod
    def channels(self) -> list[ChannelRecord]:
        """Every channel saved, in creation order."""

    @abstractmethod
    def remove_channel(self, channel: str) -> None:
        """Forget a channel and everything stored for it (an admin deleted it): a channel
        of its name made later starts empty. The sessions its lives claimed stay claimed,
        so a later channel's sessions still pass them."""

    @abstractmethod
    def save_group(self, channel: str, group: str, created_offset: int) -> None:
        """Remember a consumer group (idempotent: the first creation offset stays)."""

    @abstractmethod
    def remove_group(self, channel: str, group: str) -> None:
        """Forget a group, its acks and its dead letters."""

    @abstractmethod
    def append(
        self, channel: str, events: Sequence[Event], next_offset: int, accepted_at: float
    ) -> None:
        """Store one accepted publish batch, its ids in the delivered window and the
        channel's next offset, atomically and durably before returning (group commit:
        one transaction per batch)."""

    @abstractmethod
    def reinsert(self, channel: str, events: Sequence[Event], accepted_at: float) -> None:
        """Store events again that had been deleted (a replayed dead letter); their ids
        rejoin the delivered window at ``accepted_at`` unless they are still in it."""

    @abstractmethod
    def ack(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        """Record that one group acknowledged events other groups still hold. May be
        written later (deferred, see the module docstring)."""

    def write_deferred_now(self) -> None:  # noqa: B027 - a store that defers nothing
        """Write what was deferred now, before the caller answers: a pull client names only
        the last message it got, so an ack its get made and a crash lost would hand that
        message out again (nothing to write for a store that defers nothing)."""

    @abstractmethod
    def delete(self, channel: str, offsets: Sequence[int]) -> None:
        """Forget events every group has acknowledged (retention, DESIGN §4). May be
        written later (deferred)."""

    @abstractmethod
    def trim_delivered(self, channel: str, count: int) -> None:
        """Forget the ``count`` oldest ids of the delivered window. May be written later
        (deferred)."""

    @abstractmethod
    def save_member(self, record: MemberRecord) -> None:
        """Remember a subscription (callback URI included) so a restart resumes pushing."""

    @abstractmethod
    def remove_member(self, channel: str, group: str, member_id: str) -> None:
        """Forget a subscription that ended with unsubscribe."""

    @abstractmethod
    def save_owners(
        self,
        channel: str,
        group: str,
        changes: dict[PartitionKey, str | None],
        *,
        opened: bool = False,
    ) -> None:
        """Record partition ownership changes (None: the partition has no owner now), after
        whatever is deferred (see the module docstring), unless ``opened``: every change
        gives a partition just opened its first owner. No event of theirs was handed out,
        so nothing deferred is about them, and a key per event does not make every
        publish write the deferred acks and deletes."""

    @abstractmethod
    def add_dead_letters(self, channel: str, letters: Sequence[DeadLetterRecord]) -> None:
        """Keep poison events (a full copy: their event row may be deleted)."""

    @abstractmethod
    def remove_dead_letters(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        """Forget dead letters that were replayed."""

    @abstractmethod
    def load(self, channel: str, payload_budget: int | None = None) -> ChannelSnapshot:
        """Everything stored for a channel (an empty snapshot for an unknown one). A
        durable store gives the events past ``payload_budget`` bytes (oldest first) cold,
        without their payloads (see :mod:`~channel_server.core.spill`)."""

    @abstractmethod
    def payloads(self, channel: str, offsets: Sequence[int]) -> dict[int, Any]:
        """offset -> payload of the stored events among ``offsets`` (a cold event's, see
        :mod:`~channel_server.core.spill`)."""

    @abstractmethod
    def count(self, channel: str) -> int:
        """How many events are stored for the channel (not yet acknowledged by all)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release files and connections; the default has none."""

    @staticmethod
    def offsets(events: Iterable[Event]) -> list[int]:
        return [ev.offset for ev in events]
