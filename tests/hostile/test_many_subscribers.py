"""A thousand push subscribers from one process, their callbacks pointing nowhere.

Each is accepted (or, past the channel's --max-members, refused with LimitReached, a
CapacityError); none may cost the broker a thread of its own, even once events are
published and every push to them fails; a normal client gets through meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from channel_server.errors import CapacityError, ChannelError
from channel_server.wire import make_proxy
from tests.hostile import tally
from tests.hostile.health import Bound, failures, record_attack, timed
from tests.hostile.procinfo import Sampler
from tests.hostile.services import Stack, running_stack
from tests.hostile.tally import Outcome, Tally
from tests.integration.procs import free_port

pytestmark = pytest.mark.hostile
SUBSCRIBERS = 1000
CROWD = "crowd"
CAPPED = "capped"
MAX_MEMBERS = 20
EVENTS = 200
SECRET = "s" * 32
CROWD_BOUND = Bound(
    threads=16,
    rss_mib=64,
    why="pushes run on the broker's bounded dispatch pool, so members cost no thread; "
    "one connection subscribes them all (one worker); a member's state is a few KiB, "
    "a thousand of them a few MiB",
)


@pytest.fixture(scope="module")
def stack(hostile_root) -> Iterator[Stack]:
    """A broker with its default caps (a thousand members may be past them)."""
    with running_stack(hostile_root, "crowd", "--memory", channels=(CROWD,)) as s:
        yield s


def subscribe_many(uri: str, count: int, results: Tally, prefix: str = "m") -> None:
    """``count`` push subscriptions with callbacks on a port nobody listens on."""
    dead = free_port()
    with make_proxy(uri, 10.0) as channel:
        for n in range(count):
            callback = f"PYRO:subscriber.{prefix}{n}@127.0.0.1:{dead}"
            try:
                channel.subscribe(f"{prefix}{n}", callback, None, 10, SECRET)
                outcome = Outcome(tally.OK)
            except ChannelError as exc:
                outcome = tally.of_exception(exc)
            results.add("subscribe", outcome, f"subscribe {prefix}{n}")


def test_a_thousand_push_subscribers_cost_no_thread_each(stack: Stack) -> None:
    uri, results = stack.channel_uri(CROWD), Tally()
    pid = stack.broker.popen.pid
    with Sampler(pid) as sampler:
        subscribe_many(uri, SUBSCRIBERS, results)
        with make_proxy(uri, 10.0) as channel:  # every push to them will fail
            events = [
                {"id": f"c-{n}", "publisher_id": "c", "timestamp": 1.0 + n, "partition": n}
                for n in range(EVENTS)
            ]
            channel.publish(events)
        through, error = timed(stack.probe.round)
    row = record_attack(f"{SUBSCRIBERS} push subscribers", stack.broker, sampler, through, results)
    refused = {k: n for k, n in results.by_detail(tally.REFUSED).items() if k != "LimitReached"}
    found = failures(row, CROWD_BOUND, error) + results.problems()
    if refused:
        found.append(f"subscriptions refused other than by LimitReached: {refused}")
    assert not found, "\n".join(found)


@pytest.fixture(scope="module")
def capped(hostile_root) -> Iterator[Stack]:
    flags = ("--memory", "--max-members", str(MAX_MEMBERS))
    with running_stack(hostile_root, "capped", *flags, channels=(CAPPED,)) as s:
        yield s


def test_members_past_the_cap_get_limit_reached(capped: Stack) -> None:
    uri, results = capped.channel_uri(CAPPED), Tally()
    subscribe_many(uri, MAX_MEMBERS + 5, results)
    assert results.count(tally.OK) == MAX_MEMBERS
    assert results.by_detail(tally.REFUSED) == {"LimitReached": 5}
    with make_proxy(uri, 10.0) as channel:
        with pytest.raises(CapacityError) as refused:
            channel.subscribe("one-more", None)  # a pull member counts too
        assert type(refused.value).__name__ == "LimitReached"
        assert len(channel.stats()["groups"]["default"]["members"]) == MAX_MEMBERS
