"""A channel's restart and rebuild from what its store kept (DESIGN §7), pure functions
over a :class:`~channel_server.core.channel_core.ChannelCore`.

A restart restores groups, members, partition owners, the delivered window, dead letters
and the events each group still owes; each restored partition stays with its owner until
its restored events are resolved. A rebuild (the queues lost events) refills the queues
from the store, leaving batches in flight alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from channel_server.core.member import PULL_CALLBACK
from channel_server.core.records import DeadLetter
from channel_server.core.snapshot import ChannelSnapshot
from channel_server.events import Event

if TYPE_CHECKING:
    from channel_server.core.channel_core import ChannelCore
    from channel_server.core.group import ConsumerGroup


def restore(core: ChannelCore, snapshot: ChannelSnapshot, now: float) -> None:
    """Load what a store kept (a restart): groups, members (active again, at their
    saved callbacks), partition owners, the delivered window, dead letters, events.
    Each restored partition stays with its owner until its restored events are
    resolved: that owner may have processed them before the restart."""
    # Offsets used up by publishes that stored nothing (all duplicates) are not in
    # the store's next offset, but a group created after them starts past them.
    starts = snapshot.groups.values()
    core.next_offset = max(core.next_offset, snapshot.next_offset, *starts, 0)
    for name, created in sorted(snapshot.groups.items(), key=lambda g: g[1]):
        core.add_group(name, created)
    for record in snapshot.members:
        core.add_group(record.group).join(
            record.member_id,
            record.callback,
            record.prefetch,
            core.new_session(),
            now,
            pull=record.callback == PULL_CALLBACK,
            user=record.user,
            secret=record.secret,
        )
    for name, owners in snapshot.owners.items():
        if name in core.groups:
            for key, owner in owners.items():
                core.groups[name].restore_owner(key, owner)
    core.delivered.restore(_window_keys(core, snapshot.delivered))
    core.dead_letters = [DeadLetter(d.event, d.group, d.error) for d in snapshot.dead_letters]
    holders: dict[int, int] = {}
    sizes: dict[int, int] = {}
    snapshot = replace(snapshot, events=core.spill.cool(snapshot.events, 0))
    for group, events in _owed(core, snapshot).items():
        group.enqueue(events)
        for ev in events:
            holders[ev.offset] = holders.get(ev.offset, 0) + 1
            sizes[ev.offset] = ev.size
    core.groups_left = {offset: n for offset, n in holders.items() if n > 1}
    core.unacked = len(holders)
    core.accepted_total = core.unacked  # their acks count in this life: so must they
    core.queued_bytes = sum(sizes.values())
    for group in core.groups.values():
        group.pin_restored(core.next_offset)


def _window_keys(
    core: ChannelCore, entries: Iterable[tuple[str, str, float]]
) -> Iterator[tuple[str, str, float]]:
    """A stored window's (publisher id, id, accepted at) as (realm, id, accepted at) of
    this channel's scope (a generator: a restart may load a million)."""
    return ((core.realm(pub), i, at) for pub, i, at in entries)


def rebuild(core: ChannelCore, snapshot: ChannelSnapshot) -> int:
    """Refill the queues from the backup, in timestamp order, leaving batches in flight
    alone. Returns how many events were put back."""
    refilled = 0
    for group, events in _owed(core, snapshot).items():
        flying = group.in_flight_offsets()
        missing = [ev for ev in events if ev.offset not in flying]
        group.drop_pending()
        group.refill(core.spill.cool(missing, 0))
        refilled += len(missing)
    return refilled


def _owed(core: ChannelCore, snapshot: ChannelSnapshot) -> dict[ConsumerGroup, list[Event]]:
    """Per group, the stored events it has not acknowledged or dead-lettered."""
    dead = {(d.group, d.event.offset) for d in snapshot.dead_letters}
    owed = {}
    for group in core.groups.values():
        acked = snapshot.acks.get(group.name, set())
        owed[group] = [
            ev
            for ev in snapshot.events
            if ev.offset >= group.created_offset
            and ev.offset not in acked
            and (group.name, ev.offset) not in dead
        ]
    return owed
