"""The classic exactly-once ``get`` of a pull member (DESIGN §4), under the channel lock.

A pull member has prefetch 1: it holds at most the message it was given last, until its
next ``get`` names it (by uid, ``publisher_id/id``) as the last one received (an ack) or
it times out.
"""

from __future__ import annotations

import logging

from channel_server.backup import ChannelBackup
from channel_server.core.channel_core import ChannelCore
from channel_server.core.group import ConsumerGroup
from channel_server.core.member import PULL_CALLBACK, Flight

log = logging.getLogger("channel_server.channel")


def next_message(
    core: ChannelCore,
    backup: ChannelBackup,
    grp: ConsumerGroup,
    member_id: str,
    last_uid: str | None,
    now: float,
) -> Flight | None:
    """Acknowledge ``last_uid`` and hand out the next message, or the same one again when
    the client did not get it (a retried get). A member timed out for not calling ``get``
    is readmitted by its next one."""
    member = grp.members[member_id]
    if not member.active:
        log.warning("%s: %s readmitted by a get", core.name, member_id)
        grp.join(member_id, PULL_CALLBACK, 1, core.new_session(), now, pull=True)
    grp.members[member_id].seen(now)
    if last_uid is not None:
        _ack_last(core, backup, grp, member_id, last_uid, now)
    flights = grp.flights_of(member_id)
    if not flights and grp.take_batch(member_id, now) is not None:
        flights = grp.flights_of(member_id)
    return flights[0] if flights else None


def _ack_last(
    core: ChannelCore,
    backup: ChannelBackup,
    grp: ConsumerGroup,
    member_id: str,
    last_uid: str,
    now: float,
) -> None:
    """Acknowledge the message a pull client names as the last one it got, whether it
    is held (the usual case) or back at the head of its partition (after a restart)."""
    held = [f for f in grp.flights_of(member_id) if f.event.uid == last_uid]
    if not held and not grp.flights_of(member_id) and grp.take_event(member_id, last_uid, now):
        held = grp.flights_of(member_id)
    if held:
        session = grp.members[member_id].session
        outcome, retired = core.acknowledge(
            grp, member_id, session, [last_uid], {}, held[0].seq, now
        )
        backup.outcome(grp.name, outcome, retired)
