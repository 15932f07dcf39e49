"""Who is a member of a channel's groups, over time: room under ``max_members``, expiry
of long-inactive members and an operator's ``forget`` (pure functions over a
:class:`~channel_server.core.channel_core.ChannelCore`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from channel_server.core.records import Forgotten
from channel_server.errors import LimitReached, MemberActive, NotSubscribed
from channel_server.names import DEFAULT_GROUP

if TYPE_CHECKING:
    from channel_server.core.channel_core import ChannelCore


def make_room(core: ChannelCore) -> list[tuple[str, str]]:
    """Room for one more member under ``max_members``: when the channel is at the cap,
    the member inactive longest is forgotten (it holds and owns nothing; subscribing
    again with its id makes it a new member), unless it is the last member of a
    subscription (:func:`_keeps_subscription`). Returns the (group, member) forgotten,
    for the facade to drop from the store; raises LimitReached when no member may go."""
    forgotten: list[tuple[str, str]] = []
    while core.members() >= core.config.max_members:
        inactive = [m for m in _inactive(core) if not _keeps_subscription(core, m[1])]
        if not inactive:
            raise LimitReached("members", core.config.max_members, f"channel {core.name}")
        _, group_name, member_id = inactive[0]
        core.groups[group_name].forget(member_id)
        forgotten.append((group_name, member_id))
    return forgotten


def expire(core: ChannelCore, now: float) -> list[tuple[str, str]]:
    """Forget the members that stayed inactive with no sign of life for
    ``member_expiry_s`` (0: never), so that crashed subscribers do not stay listed for
    ever. They hold and own nothing; one that comes back subscribes again as a new
    member. The last member of a subscription is kept (:func:`_keeps_subscription`).
    Returns the (group, member) forgotten, for the facade to drop from the store."""
    expiry = core.config.member_expiry_s
    if expiry <= 0:
        return []
    forgotten = []
    for last_seen, group_name, member_id in _inactive(core):
        group = core.groups[group_name]
        if now - last_seen < expiry:
            break  # the rest were seen later
        if _keeps_subscription(core, group_name):
            continue
        group.forget(member_id)
        forgotten.append((group_name, member_id))
    return forgotten


def forget(core: ChannelCore, group_name: str, member_id: str, force: bool = False) -> Forgotten:
    """Remove a member now (an operator's ``forget``). An inactive one holds and owns
    nothing; an active one is refused with MemberActive unless ``force``, and then
    leaves as if it unsubscribed: what it held goes back to the head of its
    partitions and its partitions to the others. Raises NotSubscribed when the group
    has no such member. The facade drops the member from the store, and the group
    when it was the last member of one other than ``default`` (like unsubscribe)."""
    group = core.groups.get(group_name)
    member = group.members.get(member_id) if group is not None else None
    if group is None or member is None:
        raise NotSubscribed(member_id, core.name)
    if member.active and not force:
        raise MemberActive(member_id, group_name, core.name)
    gone = Forgotten(
        group_name,
        member_id,
        member.active,
        member.inactive_reason,
        len(member.partitions),
        member.in_flight,
    )
    if member.active:
        group.leave(member_id)
    else:
        group.forget(member_id)
    return gone


def _keeps_subscription(core: ChannelCore, group_name: str) -> bool:
    """A group other than ``default`` with one member left is a subscription holding
    events for it: only an explicit unsubscribe or :func:`forget` drops it, never room
    made for someone else's member (session 32: another user's subscribes had dropped
    a quiet subscriber's group and its backlog) nor expiry."""
    return group_name != DEFAULT_GROUP and len(core.groups[group_name].members) == 1


def _inactive(core: ChannelCore) -> list[tuple[float, str, str]]:
    """(last seen, group, member) of every inactive member, longest silent first."""
    return sorted(
        (member.last_seen, group.name, member.member_id)
        for group in core.groups.values()
        for member in group.members.values()
        if not member.active
    )
