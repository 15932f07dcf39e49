"""Counts that must agree (issue 14, item 9), on the pure core with a MemoryStore backup.

* accepted / acknowledged: a restart restores unacknowledged events whose acks then count
  in the new life, so they count as accepted in it too; a dead letter replayed after a
  restart is accepted again (it was acknowledged in a past life). Either way
  ``accepted - acknowledged == unacknowledged``, never more acks than acceptances.
* ``attempt``: it numbers the deliveries that reached, or may have reached, a member; it is
  not bounded by ``max_attempts``, which counts a member's failures in a row and an event's
  handler failures (the dead letter reports those). A delivery that never left is no attempt.
"""

from __future__ import annotations

import dataclasses

from channel_server.channel_stats import dead_letter_rows
from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore
from channel_server.core.group import ConsumerGroup
from channel_server.core.member import Batch
from channel_server.events import Event, event_uid
from channel_server.store import MemoryStore
from channel_server.store.base import ChannelSnapshot, DeadLetterRecord
from channel_server.wire import DEFAULT_GROUP
from tests.unit.group_checks import ids

MAX_ATTEMPTS = 3


def core_with(**overrides: object) -> ChannelCore:
    config = dataclasses.replace(ChannelConfig(max_attempts=MAX_ATTEMPTS), **overrides)
    return ChannelCore("c", config, first_session=1)


def publish(core: ChannelCore, *event_ids: str, store: MemoryStore | None = None) -> list[Event]:
    raw = [
        {"id": i, "publisher_id": "pub", "partition": 0, "timestamp": float(n)}
        for n, i in enumerate(event_ids, 1)
    ]
    outcome = core.prepare(raw)
    if store is not None:
        store.append("c", outcome.accepted, core.next_offset, 0.0)
    core.enqueue(outcome.accepted, 0.0)
    return outcome.accepted


def take(group: ConsumerGroup, member_id: str, now: float = 0.0) -> Batch:
    batch = group.take_batch(member_id, now)
    assert batch is not None, f"nothing for {member_id} at {now}"
    return batch


def ack(core: ChannelCore, batch: Batch, nacked: dict[str, str] | None = None) -> list[Event]:
    """The member's ack of a whole batch: every event acked but the nacked ones."""
    group = core.groups[DEFAULT_GROUP]
    failed = {event_uid("pub", i): why for i, why in (nacked or {}).items()}
    done = [ev.uid for ev in batch.events if ev.uid not in failed]
    last = batch.first_seq + len(batch.events) - 1
    _, retired = core.acknowledge(group, batch.member_id, batch.session, done, failed, last, 0.0)
    return retired


def totals(core: ChannelCore) -> tuple[int, int, int]:
    return core.accepted_total, core.acked_total, core.unacked


# -- accepted and acknowledged across a restart -------------------------------------------
def test_acks_of_restored_events_never_outnumber_the_events_accepted() -> None:
    # Given a channel that acknowledged one of three events before the broker stopped
    store = MemoryStore()
    store.save_group("c", DEFAULT_GROUP, 0)
    first = core_with()
    group = first.groups[DEFAULT_GROUP]
    group.join("s", "cb", 1, session=1, now=0.0)
    publish(first, "a", "b", "c", store=store)
    done = ack(first, take(group, "s"))
    store.ack("c", DEFAULT_GROUP, [ev.offset for ev in done])
    assert totals(first) == (3, 1, 2)

    # When a new life restores it, and the restored events and a new one are acknowledged
    second = core_with()
    second.restore(store.load("c"), 0.0)
    assert totals(second) == (2, 0, 2)  # the restored ones count as accepted in this life
    group = second.groups[DEFAULT_GROUP]
    group.join("s", "cb", 10, session=2, now=0.0)
    publish(second, "d")
    acked = []
    while (batch := group.take_batch("s", 0.0)) is not None:
        acked += ids(ack(second, batch))

    # Then every ack is of an event accepted in this life: the counts agree
    assert sorted(acked) == ["b", "c", "d"]
    assert totals(second) == (3, 3, 0)


def test_a_dead_letter_replayed_after_a_restart_is_accepted_again() -> None:
    # Given a store holding a dead letter from a past life (its event retired then)
    letter = Event("x", "pub", 0, 1.0, None, offset=0)
    snapshot = ChannelSnapshot(
        next_offset=1,
        groups={DEFAULT_GROUP: 0},
        dead_letters=[DeadLetterRecord(DEFAULT_GROUP, letter, "bad")],
    )
    core = core_with()
    core.restore(snapshot, 0.0)
    assert totals(core) == (0, 0, 0)
    # When it is replayed and then acknowledged
    _, restored = core.replay(None)
    assert ids(restored) == ["x"]
    assert totals(core) == (1, 0, 1)  # not "-1 acknowledged"
    group = core.groups[DEFAULT_GROUP]
    group.join("s", "cb", 1, session=5, now=0.0)
    ack(core, take(group, "s"))
    # Then the counts agree
    assert totals(core) == (1, 1, 0)


# -- attempts ---------------------------------------------------------------------------------
def test_attempt_counts_failed_pushes_and_a_dead_letter_counts_handler_failures() -> None:
    # Given a member whose pushes fail in transport max_attempts times in a row
    core = core_with(retry_backoff_s=1.0)
    group = core.groups[DEFAULT_GROUP]
    group.join("a", "cb-a", 1, session=1, now=0.0)
    publish(core, "e")
    now = 0.0
    for attempt in range(1, MAX_ATTEMPTS + 1):
        batch = take(group, "a", now)
        assert batch.attempts == [attempt]
        gave_up = group.push_failed(batch, now)
        now += 100.0  # past any back-off
    assert gave_up and not group.members["a"].active

    # When another member gets it (the failed pushes may have arrived: it may be seen again)
    group.join("b", "cb-b", 1, session=2, now=now)
    attempts = []
    for _ in range(MAX_ATTEMPTS):
        batch = take(group, "b", now)
        attempts += batch.attempts
        ack(core, batch, nacked={"e": "handler failed"})

    # Then attempt numbers every delivery, past max_attempts; the event is dead after
    # max_attempts failures of its handler, and its dead letter says so
    assert attempts == [4, 5, 6]
    assert [d.event.id for d in core.dead_letters] == ["e"]
    assert dead_letter_rows(core, MAX_ATTEMPTS)[0]["failures"] == MAX_ATTEMPTS
    assert totals(core) == (1, 1, 0)


def test_a_push_that_never_left_is_not_an_attempt() -> None:
    core = core_with()
    group = core.groups[DEFAULT_GROUP]
    group.join("s", "cb", 10, session=1, now=0.0)
    publish(core, "a", "b")
    # A push the member declined (it is leaving) did not reach it
    declined = take(group, "s")
    assert declined.attempts == [1, 1]
    group.push_declined(declined, 0.0, pause_s=1.0)
    # Nor did the rest of a push that could not be sent (an event of it cannot cross)
    unsent = take(group, "s", now=2.0)
    assert unsent.attempts == [1, 1]
    core.bury_unpushable(group, "s", unsent.session, unsent.seqs, {"pub/a": "cannot be sent"})
    # So the next delivery is still the first attempt; one that may have arrived counts
    again = take(group, "s", now=2.0)
    assert (ids(again.events), again.attempts) == (["b"], [1])
    group.push_failed(again, 2.0)
    assert take(group, "s", now=100.0).attempts == [2]
