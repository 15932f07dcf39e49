"""Members joining, resuming, leaving and being declared dead in a consumer group (DESIGN
§5-§6), pure functions over a :class:`~channel_server.core.group.ConsumerGroup`.

What a member held goes back to the head of its partitions whenever it stops being the
one holding it (resumed in a new session, declared dead, left); a member declared dead or
gone gives its partitions to the least-loaded others, in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channel_server.core import delivery, poison, rebalance
from channel_server.core.health import DelayTracker
from channel_server.core.member import Member, Window

if TYPE_CHECKING:
    from channel_server.core.group import ConsumerGroup


def join(
    group: ConsumerGroup,
    member_id: str,
    callback: str,
    prefetch: int,
    session: int,
    now: float,
    pull: bool = False,
    *,
    user: str = "owner",
    secret: str = "",
) -> Member:
    """Add a member, or resume one with the same id (a durable subscription) in a new
    session: what its old session held goes back first (a resumed member that was
    active keeps its partitions, so it gets those events again, in order). ``user``
    owns the id; ``secret`` is what the broker presents to its callback."""
    member = group.members.get(member_id)
    if member is None:
        member = Member(
            member_id,
            callback,
            prefetch,
            delays=DelayTracker(group.policy.delay),
            window=Window(prefetch, group.policy.window),
        )
        group.members[member_id] = member
    else:
        poison.died_holding(group, member)  # its last life ended holding them
        delivery.unfly(group, member, list(member.flights.values()))
        pace = member.window.per_event_s
        member.callback, member.prefetch = callback, prefetch
        member.window = Window(prefetch, group.policy.window)
        member.window.per_event_s = pace
        member.active, member.inactive_reason = True, ""
        member.transport_failures = member.ack_failures = 0
        member.offloaded, member.retry_at = False, 0.0
    member.session, member.pull, member.next_seq, member.answered_seq = session, pull, 1, 0
    member.user, member.secret = user, secret
    member.seen(now)
    group.assign_unowned()
    rebalance.rebalance_to(group, member)
    group.rebalancing = True  # what was busy moves as it becomes movable
    group.touched.add(member_id)
    return member


def deactivate(group: ConsumerGroup, member_id: str, reason: str) -> None:
    """Take a member out of rotation (declared dead); what it held and its partitions
    move to the least-loaded others, in order. It comes back by joining again."""
    poison.died_holding(group, group.members[member_id])
    group.deactivations.append((member_id, reason))
    set_aside(group, member_id, reason)


def set_aside(group: ConsumerGroup, member_id: str, reason: str) -> None:
    """Take a member out of rotation that did not die (a pull client that closed): as
    :func:`deactivate`, but what it still holds is not suspected of killing it, and the
    caller says so in its own words (no failure is logged)."""
    member = group.members[member_id]
    member.active, member.inactive_reason = False, reason
    delivery.unfly(group, member, list(member.flights.values()))
    _release_partitions(group, member)


def leave(group: ConsumerGroup, member_id: str) -> None:
    """Unsubscribe: the member stopped processing, so what it held goes back to the
    head of its partitions at once, and the partitions to the others."""
    member = group.members[member_id]
    member.active = False
    delivery.unfly(group, member, list(member.flights.values()))
    _release_partitions(group, member)
    del group.members[member_id]


def _release_partitions(group: ConsumerGroup, member: Member) -> None:
    for key in sorted(member.partitions, key=str):
        group.take_away(group.partitions[key])
    group.assign_unowned()
