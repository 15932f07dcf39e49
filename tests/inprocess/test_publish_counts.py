"""What a channel counts of its publishes (the monitor's published, duplicate, refused and
unrouted counters): every event published once, whatever became of it."""

from __future__ import annotations

import pytest

from channel_server.core.records import ChannelKind
from channel_server.errors import QueueFull
from channel_server.store.memory import MemoryStore
from tests.inprocess.conftest import ChannelFactory, event


def counts(stats: dict) -> tuple[int, ...]:
    keys = ("published", "accepted", "duplicates", "refused", "unrouted")
    return tuple(stats[k] for k in keys)


def test_publishes_are_counted_with_duplicates_and_refusals(make_channel: ChannelFactory) -> None:
    channel = make_channel(capacity=4)
    channel.publish([event("a"), event("b")])
    channel.publish([event("a"), event("c")])  # a: a duplicate
    with pytest.raises(QueueFull):
        channel.publish([event("d", ts=2.0), event("e", ts=3.0), event("f", ts=4.0)])
    assert counts(channel.stats()) == (7, 4, 1, 2, 0)


def test_a_topic_without_subscribers_counts_unrouted_events(
    make_channel: ChannelFactory,
) -> None:
    channel = make_channel(kind=ChannelKind.TOPIC)
    channel.publish([event("a"), event("b")])
    assert counts(channel.stats()) == (2, 0, 0, 0, 2)


class FailingStore(MemoryStore):
    def append(self, *args: object, **kwargs: object) -> None:
        raise OSError("disk full")


def test_a_publish_the_store_refused_counts_nothing(make_channel: ChannelFactory) -> None:
    channel = make_channel(store=FailingStore())
    with pytest.raises(OSError):
        channel.publish([event("a")])
    assert counts(channel.stats()) == (0, 0, 0, 0, 0)
