"""Fake channels for the monitor's tests: ``stats()`` and ``dead_letters()`` of known
values, in the shape of ``channel_stats`` (so a change there shows up here)."""

from __future__ import annotations

import base64
from typing import Any

from channel_server.access import Access
from channel_server.credentials import monitor_token
from channel_server.monitor.app import BrokerHandle
from channel_server.users import Grant, UsersFile, parse_grant

TOKEN = "local-token"
MONITOR_TOKEN = monitor_token(TOKEN)
"""What the monitor takes from the owner (the local token is refused there)."""


def member(member_id: str, active: bool = True, **values: Any) -> dict[str, Any]:
    base = {
        "id": member_id,
        "mode": "push",
        "active": active,
        "inactive_reason": None if active else "failed pushes",
        "partitions": 2,
        "queued": 3,
        "in_flight": 4,
        "window": 10,
        "delivered": 40,
        "batches": 5,
        "acked": 36,
        "ack_messages": 4,
        "failures": 1,
        "small_delays": 2,
        "long_delays": 0,
        "offloads": 1,
        "seen_s_ago": 0.5,
        "oldest_in_flight_s": 2.5,
    }
    return base | values


def group(backlog: int, members: list[dict[str, Any]], partitions: list[Any]) -> dict[str, Any]:
    """A group of ``stats()``: 2 nacked, 3 redelivered, 1 dead-lettered, ``backlog``
    acks timed (all but one within 10 ms)."""
    return {
        "backlog": backlog,
        "nacked": 2,
        "redelivered": 3,
        "dead_lettered": 1,
        "suspects": 2,
        "ack_latency_s": {"buckets": [[0.01, 5], ["+Inf", 6]], "count": 6, "sum": 0.5},
        "members": members,
        "partitions_total": len(partitions),
        "in_flight": sum(p["in_flight"] for p in partitions),
        "partitions": partitions,
    }


def stats(name: str, accepted: int = 12, acked: int = 7, **groups: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "queue",
        "ids": "publisher",
        "capacity": 1000,
        "unacked": accepted - acked,
        "max_queued_bytes": 1 << 20,
        "queued_bytes": 500,
        "max_members": 10,
        "partition_queues": 2,
        "max_partition_queues": 1000,
        "accepted": accepted,
        "acked": acked,
        "payload_memory_bytes": 1 << 24,
        "queued_cold": 4,
        "read_back": 3,
        "rates": {"interval_s": 10.0, "accepted_per_s": 1.2, "acked_per_s": 0.7},
        "dead_letters": 1,
        "durable": True,
        "stored": accepted - acked,
        "store_write_s": {"buckets": [[0.001, 3], ["+Inf", 4]], "count": 4, "sum": 0.01},
        "restore_s": 0.25,
        "broker_cpu_share": 0.83,
        "machine_cpu_share": 0.79,
        "busy": True,
        "groups": groups
        or {
            "default": group(
                accepted - acked,
                [member("s1"), member("s2", active=False, partitions=0)],
                [
                    {
                        "publisher_id": "P",
                        "partition": 1,
                        "owner": "s1",
                        "pending": 2,
                        "in_flight": 3,
                    },
                    {
                        "publisher_id": "P",
                        "partition": 2,
                        "owner": "s1",
                        "pending": 0,
                        "in_flight": 1,
                    },
                ],
            )
        },
    }


class FakeChannel:
    def __init__(self, name: str, **kwargs: Any) -> None:
        self.stats_dict = stats(name, **kwargs)
        self.replayed: list[list[str] | None] = []
        self.letters = [
            {
                "id": "<b>x</b>",
                "publisher_id": "P",
                "partition": 1,
                "group": "default",
                "error": "boom",
                "failures": 3,
            }
        ]

    def stats(self) -> dict[str, Any]:
        return self.stats_dict

    def dead_letters(self) -> list[dict[str, Any]]:
        return self.letters

    def replay_dead_letters(self, ids: list[str] | None = None) -> int:
        self.replayed.append(ids)
        return len(self.letters) if ids is None else len(ids)


def users() -> UsersFile:
    """alice publishes to orders*; carol is an admin of orders only."""
    found = UsersFile()
    found.add("alice", "alice-pw", [parse_grant("publish:orders*")])
    found.add("carol", "carol-pw", [Grant("orders", frozenset(["admin"]))])
    return found


def handle(*channels: FakeChannel) -> BrokerHandle:
    table = {c.stats_dict["name"]: c for c in channels}
    return BrokerHandle("b1", Access(TOKEN, users()), lambda: dict(table))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
