"""EventChannel.outstanding at the facade: boundary checks, access control, and counts that
survive queues that lost events (kill_queues). Pull members, no sockets."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest
from Pyro5.callcontext import current_context

from channel_server.access import USER_ATTRIBUTE
from channel_server.errors import InvalidArgument, NotAuthorized
from channel_server.users import Action, Grant, User
from tests.inprocess.conftest import ChannelFactory, event


@pytest.fixture
def as_user() -> Iterator[Callable[[User], None]]:
    """Serve the calls of this thread as if they came over a connection of ``user``."""

    def become(user: User) -> None:
        current_context.client = SimpleNamespace(**{USER_ATTRIBUTE: user})

    yield become
    current_context.client = None


def test_counts_follow_a_get_and_its_ack(make_channel: ChannelFactory) -> None:
    channel = make_channel()
    channel.subscribe("p1")
    channel.publish([event("e1"), event("e2", ts=2.0)])
    assert channel.outstanding("pub") == {
        "outstanding": 2,
        "queued": 2,
        "in_flight": 0,
        "dead_letters": 0,
        "unserved": {},  # p1 is a member of the topic's group
    }
    first = channel.get("p1")["event"]
    assert channel.outstanding("pub")["in_flight"] == 1
    channel.get("p1", f"pub/{first['id']}")
    channel.get("p1", "pub/e2")
    assert channel.outstanding("pub")["outstanding"] == 0
    assert channel.outstanding("someone-else")["outstanding"] == 0


def test_events_lost_from_memory_are_counted_once_rebuilt(make_channel: ChannelFactory) -> None:
    channel = make_channel()
    channel.publish([event("e1"), event("e2", partition=1)])
    assert channel.kill_queues() == 2
    assert channel.outstanding("pub")["queued"] == 2  # rebuilt from the backup, not 0


@pytest.mark.parametrize("publisher_id", ["", "a/b", "x" * 129, 7, None])
def test_a_bad_publisher_id_is_refused_by_name(
    make_channel: ChannelFactory, publisher_id: object
) -> None:
    with pytest.raises(InvalidArgument) as info:
        make_channel().outstanding(publisher_id)
    assert info.value.argument == "publisher_id"


def test_only_a_user_who_may_publish_may_ask(
    make_channel: ChannelFactory, as_user: Callable[[User], None]
) -> None:
    channel = make_channel("orders")
    channel.publish([event("e1")])
    as_user(User("bob", (Grant("orders*", frozenset({Action.SUBSCRIBE})),)))
    with pytest.raises(NotAuthorized, match="publish on channel 'orders'"):
        channel.outstanding("pub")
    as_user(User("alice", (Grant("orders*", frozenset({Action.PUBLISH})),)))
    with pytest.raises(NotAuthorized, match="may not: publish as 'pub'"):
        channel.outstanding("pub")  # another's publisher id
    channel.publish([dict(event("e2"), publisher_id="alice-1")])
    assert channel.outstanding("alice-1")["queued"] == 1
