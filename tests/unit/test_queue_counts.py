"""The queue counters behind the channel's invariant (held == queued + in flight).

A group's ``backlog`` is a counter its partition queues keep as they change, so the
invariant costs O(groups) on every publish and get; these tests hold it to a count of the
queues (``counted_backlog``) after every step of the core's random interleavings, and check
that the fault ``kill_queues`` still shows as lost events.
"""

from __future__ import annotations

import random

from channel_server.core.queues import PartitionQueue, QueueCount
from channel_server.events import IdScope
from tests.unit.group_checks import make_event
from tests.unit.test_core_random import Driver, random_op


def test_every_change_of_a_partition_queue_is_counted() -> None:
    count = QueueCount()
    pq = PartitionQueue(("p", 0), count)
    events = [make_event(n) for n in range(5)]
    assert pq.put_back(events) == 5 and count.events == 5
    assert (count.in_flight, list(count.holding)) == (0, [("p", 0)])
    taken, _ = pq.take(2)
    assert count.events == 5  # pending to in flight: still held here
    assert count.in_flight == 2
    pq.resolve(taken[:1])
    pq.remove_pending([events[4]])
    assert count.events == 3 == len(pq.pending) + len(pq.in_flight)
    assert count.in_flight == 1
    assert pq.drop_pending() == 2 and count.events == 1
    assert list(count.holding) == [("p", 0)]  # one still in flight
    pq.resolve(taken[1:])
    assert (count.events, count.in_flight, count.holding) == (0, 0, {})


def holding_counts(group) -> tuple[tuple[int, set], tuple[int, set]]:
    """The in-flight counter and the partitions said to hold events, then both counted."""
    counted = sum(len(pq.in_flight) for pq in group.partitions.values())
    busy = {key for key, pq in group.partitions.items() if pq.pending or pq.in_flight}
    return (group.in_flight, {pq.key for pq in group.holding()}), (counted, busy)


def test_the_counters_equal_a_count_of_the_queues_after_every_step() -> None:
    for seed in range(60):
        rng = random.Random(seed)
        driver = Driver(IdScope.CHANNEL if seed % 2 else IdScope.PUBLISHER)
        for step in range(120):
            random_op(driver, rng.choice, rng.randint)
            counts = {n: (g.backlog, g.counted_backlog()) for n, g in driver.core.groups.items()}
            assert all(a == b for a, b in counts.values()), f"seed {seed}, step {step}: {counts}"
            for name, group in driver.core.groups.items():
                kept, counted = holding_counts(group)
                assert kept == counted, f"seed {seed}, step {step}, group {name}"


def test_kill_queues_shows_as_lost_events_until_the_rebuild() -> None:
    driver = Driver()
    driver.join("default", "m1", 2)
    driver.publish([("pub", 0, 1.0, None), ("pub", 1, 2.0, None)], retry=False)
    core = driver.core
    assert core.lost() == 0
    assert core.kill_queues() == 2
    assert core.lost() == 2 == sum(g.held - g.counted_backlog() for g in core.groups.values())
