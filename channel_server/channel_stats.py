"""What a channel reports about itself: JSON-friendly snapshots of its core (pure).

Read under the channel's lock by ``stats`` and ``dead_letters``; ``status``, ``list`` and
the tests read the same dicts.
"""

from __future__ import annotations

from typing import Any

from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore
from channel_server.core.group import ConsumerGroup
from channel_server.core.member import Member


def channel_stats(
    core: ChannelCore, config: ChannelConfig, durable: bool, now: float
) -> dict[str, Any]:
    return {
        "name": core.name,
        "kind": core.kind.value,
        "ids": core.id_scope.value,
        "capacity": config.capacity,
        "unacked": core.unacked,
        "max_queued_bytes": config.max_queued_bytes,
        "queued_bytes": core.queued_bytes,
        "max_members": config.max_members,
        "accepted": core.accepted_total,
        "acked": core.acked_total,
        "dead_letters": len(core.dead_letters),
        "durable": durable,
        "groups": {name: group_stats(grp, now) for name, grp in core.groups.items()},
    }


def group_stats(grp: ConsumerGroup, now: float) -> dict[str, Any]:
    return {
        "backlog": grp.backlog,
        "members": [
            member_stats(m, now) for m in sorted(grp.members.values(), key=lambda m: m.member_id)
        ],
        "partitions": [
            {
                "publisher_id": pq.key[0],
                "partition": pq.key[1],
                "owner": pq.owner,
                "pending": len(pq.pending),
                "in_flight": len(pq.in_flight),
            }
            for pq in grp.partitions.values()
        ],
    }


def member_stats(m: Member, now: float) -> dict[str, Any]:
    return {
        "id": m.member_id,
        "mode": "pull" if m.pull else "push",
        "active": m.active,
        "inactive_reason": m.inactive_reason,
        "partitions": len(m.partitions),
        "queued": m.queued,
        "in_flight": m.in_flight,
        "window": m.window.limit(),
        "delivered": m.delivered,
        "acked": m.acked,
        "failures": m.failures,
        "small_delays": m.delays.small,
        "long_delays": m.delays.long,
        "seen_s_ago": round(max(0.0, now - m.last_seen), 3),
    }


def dead_letter_rows(core: ChannelCore, max_attempts: int) -> list[dict[str, Any]]:
    rows = []
    for letter in core.dead_letters:
        row = dict(letter.event.to_dict(), group=letter.group, error=letter.error)
        del row["attempt"]  # it failed max_attempts times, whatever its last attempt
        row["failures"] = max_attempts
        rows.append(row)
    return rows
