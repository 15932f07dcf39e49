"""Global queue and partition sub-queues keep (timestamp, offset) order."""

from __future__ import annotations

import random
from collections import deque

from sortedcontainers import SortedList

from channel_server.core.queues import SHORT_PENDING, GlobalQueue, PartitionQueue
from channel_server.events import Event


def ev(offset: int, ts: float, partition: int = 0) -> Event:
    return Event(f"e{offset}", "pub", partition, ts, None, offset)


def order(events: list[Event]) -> list[int]:
    return [e.offset for e in events]


def test_global_queue_drains_in_timestamp_then_offset_order() -> None:
    q = GlobalQueue()
    q.add_many([ev(0, 3.0), ev(1, 1.0), ev(2, 2.0)])
    q.add_many([ev(3, 1.0), ev(4, 0.5)])
    assert len(q) == 5
    assert order(q.drain()) == [4, 1, 3, 2, 0]
    assert len(q) == 0
    assert q.drain() == []


def test_global_queue_clear() -> None:
    q = GlobalQueue()
    q.add_many([ev(0, 1.0)])
    q.clear()
    assert len(q) == 0


def test_partition_queue_take_returns_oldest_first() -> None:
    pq = PartitionQueue(("pub", 0))
    assert pq.put_back([ev(5, 2.0), ev(1, 1.0), ev(3, 1.0), ev(0, 9.0)]) == 4
    assert pq.ready and not pq.idle
    batch, fresh = pq.take(3)
    assert (order(batch), fresh) == ([1, 3, 5], 3)
    assert pq.in_flight is batch
    assert order(list(pq.pending)) == [0]
    assert not pq.ready  # a batch is in flight
    assert not pq.idle


def test_put_back_restores_order_before_newer_events() -> None:
    pq = PartitionQueue(("pub", 0))
    pq.put_back([ev(i, float(i)) for i in range(6)])
    batch, _ = pq.take(2)
    pq.put_back([ev(6, 0.5)])  # published late with an early timestamp
    pq.in_flight = []
    assert pq.put_back(batch) == 2
    assert order(list(pq.pending)) == [0, 6, 1, 2, 3, 4, 5]
    assert order(pq.take(10)[0]) == [0, 6, 1, 2, 3, 4, 5]
    assert not pq.pending


def test_take_limit_and_empty_queue() -> None:
    pq = PartitionQueue(("pub", "k"))
    assert pq.idle and not pq.ready
    assert pq.take(5) == ([], 0)
    pq.put_back([ev(0, 1.0), ev(1, 1.0)])
    assert order(pq.take(1)[0]) == [0]
    pq.in_flight = []
    assert order(pq.take(1)[0]) == [1]


def test_events_held_back_for_the_owner_are_taken_whatever_the_limit() -> None:
    pq = PartitionQueue(("pub", 0))
    pq.put_back([ev(i, float(i)) for i in range(5)])
    pq.held_back = {0, 1, 3}
    assert pq.held_pending() == 3 and not pq.movable
    batch, fresh = pq.take(1)  # 0, 1, 3 are owed; 2 comes along (order); 4 waits
    assert (order(batch), fresh) == ([0, 1, 2, 3], 1)
    pq.in_flight = []
    pq.held_back = {4}
    assert pq.take(0) == ([pq.in_flight[0]], 0) and order(pq.in_flight) == [4]


def test_new_partition_has_no_owner() -> None:
    pq = PartitionQueue(("pub", 3))
    assert pq.owner is None
    assert pq.idle_since is None
    assert pq.key == ("pub", 3)


def test_pending_events_keep_delivery_order_whatever_order_they_come_in() -> None:
    """Puts at either end, in the middle, takes and removals, against a sorted model."""
    rng = random.Random(16)
    pq, model, offset = PartitionQueue(("pub", 0)), [], 0
    for _ in range(400):
        if rng.random() < 0.6:
            base = rng.choice([-5.0, 0.0, 50.0, 100.0])  # before, among or after the rest
            events = [ev(offset + i, base + rng.random() * 50) for i in range(rng.randint(1, 4))]
            offset += len(events)
            assert pq.put_back(events) == len(events)
            model.extend(events)
        elif rng.random() < 0.8:
            pq.in_flight = []
            model.sort(key=lambda e: (e.timestamp, e.offset))
            taken, _ = pq.take(rng.randint(0, 3))
            assert taken == model[: len(taken)]
            del model[: len(taken)]
        elif model:
            gone = rng.choice(model)
            pq.remove_pending([gone])
            model.remove(gone)
        model.sort(key=lambda e: (e.timestamp, e.offset))
        assert list(pq.pending) == model and len(pq.pending) == len(model)
    assert order(pq.take(len(model))[0]) == order(model)
    assert isinstance(pq.pending, list), "an emptied queue is a list again"


def test_an_event_in_the_middle_makes_the_pending_queue_sorted_until_it_empties() -> None:
    pq = PartitionQueue(("pub", 0))
    pq.put_back([ev(0, 1.0), ev(1, 3.0)])
    pq.put_back([ev(2, 0.5)])  # at the front: still a list
    assert isinstance(pq.pending, list)
    pq.put_back([ev(3, 2.0)])  # in the middle
    assert isinstance(pq.pending, SortedList)
    assert order(pq.take(4)[0]) == [2, 0, 3, 1]
    assert isinstance(pq.pending, list)


def test_a_long_pending_queue_is_a_deque_so_taking_from_its_front_moves_nothing() -> None:
    pq = PartitionQueue(("pub", 0))
    pq.put_back([ev(i, float(i + 1)) for i in range(SHORT_PENDING)])
    assert isinstance(pq.pending, list)
    pq.put_back([ev(SHORT_PENDING, float(SHORT_PENDING + 1))])
    assert isinstance(pq.pending, deque) and len(pq.pending) == SHORT_PENDING + 1
    pq.put_back([ev(-1, 0.5)])  # at the front: still a deque
    assert isinstance(pq.pending, deque) and order(pq.pending)[:2] == [-1, 0]
    batch, _ = pq.take(SHORT_PENDING)
    assert order(batch) == list(range(-1, SHORT_PENDING - 1))
    pq.in_flight = []
    assert order(pq.take(5)[0]) == [SHORT_PENDING - 1, SHORT_PENDING]
    assert isinstance(pq.pending, list)


def test_an_event_in_the_middle_of_a_long_queue_makes_it_sorted() -> None:
    pq = PartitionQueue(("pub", 0))
    pq.put_back([ev(i, float(i)) for i in range(SHORT_PENDING + 2)])
    pq.put_back([ev(-1, 1.5)])  # between the events of offsets 1 and 2
    assert isinstance(pq.pending, SortedList)
    assert order(pq.take(4)[0]) == [0, 1, -1, 2]
