"""Cold events (core/spill.py): a backlog past the payload budget is queued without its
payloads and gets them back from the store as it is taken, in order, once per take."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from msgspec.structs import replace

from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore
from channel_server.core.group import ConsumerGroup
from channel_server.core.snapshot import ChannelSnapshot
from channel_server.core.spill import COLD, PayloadSpill, cold_count
from channel_server.errors import StoreError
from channel_server.events import Event, validate_batch
from channel_server.wire import DEFAULT_GROUP

SIZE = len("e0") + len("payload-e0")
"""Event.size of every event here: its id and its payload (ids e0..e9)."""


class FakeStore:
    """Payloads by offset, as a durable store keeps every accepted event's."""

    def __init__(self) -> None:
        self.rows: dict[int, Any] = {}
        self.reads: list[list[int]] = []

    def read(self, offsets: list[int]) -> dict[int, Any]:
        self.reads.append(list(offsets))
        return {o: self.rows[o] for o in offsets if o in self.rows}


def raw(i: int, partition: int | str = 0) -> dict[str, Any]:
    return {
        "id": f"e{i}",
        "publisher_id": "pub",
        "partition": partition,
        "timestamp": float(i),
        "payload": f"payload-e{i}",
    }


def events(count: int) -> list[Event]:
    """Validated events e0.. numbered from offset 0, as a store gives them back."""
    valid = validate_batch([raw(i) for i in range(count)])
    return [replace(ev, offset=i) for i, ev in enumerate(valid)]


def channel(
    budget_events: int, store: FakeStore, **overrides: Any
) -> tuple[ChannelCore, ConsumerGroup]:
    budget = budget_events * SIZE
    config = dataclasses.replace(ChannelConfig(), payload_memory_bytes=budget, **overrides)
    core = ChannelCore("c", config)
    core.spill.reader = store.read
    return core, core.groups[DEFAULT_GROUP]


def publish(core: ChannelCore, store: FakeStore, batch: list[dict[str, Any]]) -> None:
    """As the channel does: store the accepted events, then queue them."""
    outcome = core.prepare(batch)
    store.rows.update((ev.offset, ev.payload) for ev in outcome.accepted)
    core.enqueue(outcome.accepted, 0.0)


def pending(group: ConsumerGroup) -> list[Event]:
    return [ev for pq in group.partitions.values() for ev in pq.pending]


# -- the rule ------------------------------------------------------------------------------
def test_the_oldest_budget_bytes_keep_their_payloads() -> None:
    spill = PayloadSpill(3 * SIZE, FakeStore().read)
    kept = spill.cool(events(5), queued_bytes=0)
    assert [ev.payload is COLD for ev in kept] == [False, False, False, True, True]
    assert [ev.offset for ev in kept] == [0, 1, 2, 3, 4]
    assert cold_count(spill.cool(events(2), queued_bytes=3 * SIZE)) == 2
    assert spill.cooled_total == 4


def test_nothing_goes_cold_within_the_budget_or_without_a_store() -> None:
    batch = events(5)
    assert PayloadSpill(5 * SIZE, FakeStore().read).cool(batch, 0) is batch
    assert PayloadSpill(0).cool(batch, 10**9) is batch  # no reader: the memory store


def test_warming_reads_the_cold_payloads_once_in_place() -> None:
    store = FakeStore()
    store.rows = {ev.offset: ev.payload for ev in events(4)}
    spill = PayloadSpill(SIZE, store.read)
    batch = spill.cool(events(4), 0)
    spill.warm(batch)
    assert [ev.payload for ev in batch] == [f"payload-e{i}" for i in range(4)]
    assert store.reads == [[1, 2, 3]]
    spill.warm(batch)  # nothing cold: no read
    assert (store.reads, spill.warmed_total) == ([[1, 2, 3]], 3)


def test_a_payload_the_store_lacks_is_an_error_that_changes_nothing() -> None:
    store = FakeStore()
    store.rows = {0: "payload-e0", 1: "payload-e1"}
    spill = PayloadSpill(0, store.read)
    batch = spill.cool(events(3), 0)
    with pytest.raises(StoreError, match=r"no payload stored for queued offsets \[2\]"):
        spill.warm(batch)
    assert cold_count(batch) == 3


# -- a channel ------------------------------------------------------------------------------
def test_a_backlog_past_the_budget_is_delivered_whole_in_order() -> None:
    # Given 10 events published to one partition with room for the payloads of 3
    store = FakeStore()
    core, group = channel(3, store)
    publish(core, store, [raw(i) for i in range(10)])
    assert cold_count(pending(group)) == 7
    group.join("s", "cb", 4, session=1, now=0.0)
    # When the member takes 4 and fails them all, then takes everything
    first = group.take_batch("s", 0.0)
    assert first is not None
    assert [ev.payload for ev in first.events] == [f"payload-e{i}" for i in range(4)]
    assert all(f.event.payload is not COLD for f in group.members["s"].flights.values())
    uids = [ev.uid for ev in first.events]
    core.acknowledge(group, "s", 1, [], dict.fromkeys(uids, "boom"), first.first_seq + 3, 0.0)
    seen = []
    while (batch := group.take_batch("s", 0.0)) is not None:
        seen += [(ev.id, ev.payload) for ev in batch.events]
        core.acknowledge(group, "s", 1, [ev.uid for ev in batch.events], {}, 0, 0.0)
    # Then every event came with its payload, in order, and each cold one was read once
    assert seen == [(f"e{i}", f"payload-e{i}") for i in range(10)]
    assert sorted(o for read in store.reads for o in read) == list(range(3, 10))
    assert (group.backlog, group.counted_backlog(), core.unacked) == (0, 0, 0)


def test_events_queued_once_the_backlog_is_short_again_keep_their_payloads() -> None:
    store = FakeStore()
    core, group = channel(2, store)
    publish(core, store, [raw(i) for i in range(4)])
    group.join("s", "cb", 10, session=1, now=0.0)
    batch = group.take_batch("s", 0.0)
    assert batch is not None
    core.acknowledge(group, "s", 1, [ev.uid for ev in batch.events], {}, 0, 0.0)
    publish(core, store, [raw(i) for i in range(4, 7)])
    assert [ev.payload is COLD for ev in pending(group)] == [False, False, True]


def test_a_missing_payload_holds_back_only_its_own_partition() -> None:
    # Given two partitions, each one cold event, and the store lost the second's row
    store = FakeStore()
    core, group = channel(0, store)
    publish(core, store, [raw(0, partition="a"), raw(1, partition="b")])
    del store.rows[1]
    group.join("s", "cb", 10, session=1, now=0.0)
    # When the member is given a batch
    batch = group.take_batch("s", 0.0)
    # Then it gets partition a's event; b's stays queued, and taking it again says why
    assert batch is not None and [ev.id for ev in batch.events] == ["e0"]
    assert [ev.id for ev in group.partitions[("pub", "b")].pending] == ["e1"]
    assert group.backlog == group.counted_backlog() == 2
    with pytest.raises(StoreError, match="no payload stored"):
        group.take_batch("s", 0.0)


def test_a_restart_restores_a_long_backlog_cold_past_the_budget() -> None:
    store = FakeStore()
    stored = events(6)
    store.rows = {ev.offset: ev.payload for ev in stored}
    core, group = channel(2, store)
    core.restore(ChannelSnapshot(next_offset=6, groups={DEFAULT_GROUP: 0}, events=stored), 0.0)
    assert [ev.payload is COLD for ev in pending(group)] == [False, False] + [True] * 4
    group.join("s", "cb", 10, session=core.new_session(), now=0.0)
    batch = group.take_batch("s", 0.0)
    assert batch is not None
    assert [ev.payload for ev in batch.events] == [f"payload-e{i}" for i in range(6)]


def test_a_cold_event_given_up_on_is_a_dead_letter_with_its_payload() -> None:
    # Given a cold event whose handler fails on its only attempt
    store = FakeStore()
    core, group = channel(0, store, max_attempts=1)
    publish(core, store, [raw(0)])
    group.join("s", "cb", 10, session=1, now=0.0)
    batch = group.take_batch("s", 0.0)
    assert batch is not None
    # When it is nacked, then replayed after it was retired
    _, retired = core.acknowledge(group, "s", 1, [], {batch.events[0].uid: "boom"}, 0, 0.0)
    # Then the dead letter, the event the store keeps again and the replay have its payload
    assert [d.event.payload for d in core.dead_letters] == ["payload-e0"]
    assert [ev.payload for ev in retired] == ["payload-e0"]
    _, restored = core.replay(None)
    assert [ev.payload for ev in restored] == ["payload-e0"]
    assert [ev.payload for ev in pending(group)] == ["payload-e0"]


def test_a_failed_read_after_another_partition_was_taken_still_delivers_that_one() -> None:
    # Given two cold partitions and a store that fails on the second read (a broken
    # connection), as a PostgreSQL store may
    store = FakeStore()
    core, group = channel(0, store)
    publish(core, store, [raw(0, partition="a"), raw(1, partition="b")])
    reads = 0

    def flaky(offsets: list[int]) -> dict[int, Any]:
        nonlocal reads
        reads += 1
        if reads == 2:
            raise StoreError("db", "connection lost")
        return store.read(offsets)

    core.spill.reader = flaky
    group.join("s", "cb", 10, session=1, now=0.0)
    # When the member is given a batch, and another once the store answers again
    batch = group.take_batch("s", 0.0)
    assert batch is not None and [ev.payload for ev in batch.events] == ["payload-e0"]
    assert [ev.id for ev in group.partitions[("pub", "b")].pending] == ["e1"]
    again = group.take_batch("s", 0.0)
    # Then nothing was lost or stuck in flight on the way
    assert again is not None and [ev.payload for ev in again.events] == ["payload-e1"]
    assert group.backlog == group.counted_backlog() == 2
