"""The least-loaded sticky assignment policy (DESIGN §5).

A partition with no owner goes to the member with the least load, where
``load = partition_weight * partitions_owned + events_queued + events_in_flight``.
Ties go to the lowest member id so that every run, and every test, is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MemberLoad:
    """What the policy needs to know about one active member."""

    member_id: str
    partitions_owned: int = 0
    events_queued: int = 0
    events_in_flight: int = 0

    def load(self, partition_weight: int) -> int:
        return partition_weight * self.partitions_owned + self.events_queued + self.events_in_flight


def least_loaded(loads: Mapping[str, int]) -> str:
    """The key with the smallest load; ties broken by the smallest key.

    Raises ValueError on an empty mapping: the caller must wait for a member instead.
    """
    if not loads:
        raise ValueError("no active member to assign to")
    return min(loads.items(), key=lambda item: (item[1], item[0]))[0]


def choose_member(members: list[MemberLoad], partition_weight: int) -> str:
    """The member an unowned partition goes to."""
    return least_loaded({m.member_id: m.load(partition_weight) for m in members})
