"""The JSON shapes of channel state that ``list --json``, ``status --json`` and the HTTP
API all give, built from a channel's ``stats()`` (pure): one place, so the page, a script
and the terminal read the same thing."""

from __future__ import annotations

from typing import Any


def channel_row(channel: str, broker: str, stats: dict[str, Any] | None) -> dict[str, Any]:
    """One line of ``list``: counts of groups, members and unacknowledged events, and the
    counters and rates of the channel (None ``stats``: its broker did not answer)."""
    if stats is None:
        return {
            "channel": channel,
            "broker": broker,
            "reachable": False,
            "groups": "?",
            "members": "?",
            "backlog": "?",
        }
    groups = stats["groups"]
    members = [m for g in groups.values() for m in g["members"]]
    return {
        "channel": channel,
        "broker": broker,
        "reachable": True,
        "groups": len(groups),
        "members": len(members),
        "backlog": stats["unacked"],
        "kind": stats["kind"],
        "active_members": sum(1 for m in members if m["active"]),
        "accepted": stats["accepted"],
        "acked": stats["acked"],
        "dead_letters": stats["dead_letters"],
        "rates": stats.get("rates"),
    }


def channel_status(broker: str, stats: dict[str, Any]) -> dict[str, Any]:
    """One channel of ``status --json``: its whole ``stats()`` and the broker hosting it."""
    return dict(stats, broker=broker)
