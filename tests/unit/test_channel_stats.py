"""A group's ``stats``: every partition counted, the busiest listed (a bounded reply)."""

from __future__ import annotations

import pytest

from channel_server import channel_stats
from channel_server.channel_stats import group_stats
from channel_server.core.group import ConsumerGroup, GroupPolicy
from channel_server.core.member import WindowPolicy
from tests.unit.group_checks import make_event


def a_group_with_five_partitions() -> ConsumerGroup:
    """Partition p holds p + 1 events, and s1 has taken partition 0's one event."""
    group = ConsumerGroup("g", GroupPolicy(window=WindowPolicy(1000)))
    group.join("s1", "cb", 1, 1, 0.0, False)
    offset = 0
    for partition in range(5):
        group.enqueue([make_event(offset + i, partition) for i in range(partition + 1)])
        offset += partition + 1
    assert group.take_batch("s1", 0.0) is not None  # prefetch 1: partition 0's event
    return group


def test_every_partition_is_listed_up_to_the_bound() -> None:
    stats = group_stats(a_group_with_five_partitions(), 0.0)
    assert stats["partitions_total"] == 5
    assert stats["in_flight"] == 1
    assert sorted(row["partition"] for row in stats["partitions"]) == [0, 1, 2, 3, 4]


def test_past_the_bound_the_busiest_partitions_are_listed_and_all_are_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(channel_stats, "STATS_PARTITIONS", 2)
    stats = group_stats(a_group_with_five_partitions(), 0.0)
    assert stats["partitions_total"] == 5
    assert stats["in_flight"] == 1  # partition 0's, though it is not listed
    assert [(row["partition"], row["pending"]) for row in stats["partitions"]] == [(4, 5), (3, 4)]


def test_past_the_bound_idle_partitions_fill_the_list_and_are_not_looked_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = a_group_with_five_partitions()
    for partition in (1, 2, 3):  # emptied: idle partitions waiting to be dropped
        pq = group.partitions[("p", partition)]
        pq.remove_pending(list(pq.pending))
    assert {pq.key for pq in group.holding()} == {("p", 0), ("p", 4)}
    monkeypatch.setattr(channel_stats, "STATS_PARTITIONS", 3)
    rows = group_stats(group, 0.0)["partitions"]
    assert [(row["partition"], row["pending"], row["in_flight"]) for row in rows] == [
        (4, 5, 0),
        (0, 0, 1),
        (1, 0, 0),  # an idle one, the first in the group's order, fills the list
    ]
