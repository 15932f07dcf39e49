"""When a short push is worth a linger: publishes streaming in, not a burst (fake times)."""

from __future__ import annotations

import math

from channel_server.core.arrivals import Arrivals

LINGER_S = 0.004


def publishes(*times: float) -> Arrivals:
    arrivals = Arrivals()
    for at in times:
        arrivals.publish(at)
    return arrivals


def test_no_gap_is_known_before_two_publishes() -> None:
    assert math.isinf(Arrivals().gap_s)
    assert math.isinf(publishes(5.0).gap_s)
    assert not publishes(5.0).worth_lingering(LINGER_S, 0)


def test_the_gap_is_a_moving_average_of_the_last_few() -> None:
    arrivals = publishes(0.0, 0.001)
    assert arrivals.gap_s == 0.001
    arrivals.publish(0.011)  # one 10 ms gap moves it a tenth of the way
    assert math.isclose(arrivals.gap_s, 0.001 + 0.1 * 0.009)
    assert arrivals.count == 3


def test_one_event_publishes_a_millisecond_apart_are_worth_lingering_for() -> None:
    """Four members, each pushed every fourth publish: a 4 ms linger spans four more."""
    arrivals = publishes(*(i * 0.001 for i in range(20)))
    assert arrivals.worth_lingering(LINGER_S, count_at_push=arrivals.count - 4)


def test_a_burst_every_10_ms_is_not() -> None:
    """A hundred events a publish, every 10 ms: what the member gets came whole."""
    arrivals = publishes(*(i * 0.010 for i in range(20)))
    assert not arrivals.worth_lingering(LINGER_S, count_at_push=arrivals.count - 1)


def test_a_paced_publisher_catching_up_on_late_ticks_is_still_a_burst() -> None:
    """Ticks of 10 ms; two came late, and their publishes went back to back."""
    times = [i * 0.010 for i in range(20)] + [0.2003, 0.2006]
    arrivals = publishes(*times)
    assert not arrivals.worth_lingering(LINGER_S, count_at_push=arrivals.count - 1)


def test_a_member_pushed_seldom_needs_more_publishes_in_the_linger() -> None:
    """Its ready events came over many publishes (64 members, 256 partitions): a few
    more publishes add little to them."""
    arrivals = publishes(*(i * 0.002 for i in range(40)))
    assert arrivals.worth_lingering(LINGER_S, count_at_push=arrivals.count - 2)
    assert not arrivals.worth_lingering(LINGER_S, count_at_push=arrivals.count - 14)


def test_a_long_pause_ends_the_stream_at_once() -> None:
    arrivals = publishes(*(i * 0.001 for i in range(20)))
    arrivals.publish(10.0)
    assert not arrivals.worth_lingering(LINGER_S, count_at_push=arrivals.count - 1)


def test_no_linger_when_it_is_off() -> None:
    arrivals = publishes(0.0, 0.0, 0.0)
    assert arrivals.gap_s == 0.0
    assert not arrivals.worth_lingering(0.0, count_at_push=arrivals.count)
    assert arrivals.worth_lingering(LINGER_S, count_at_push=arrivals.count)


LAST = 99 * 0.005
"""The last of the publishes 5 ms apart below."""


def test_a_member_pushed_seldom_on_a_busy_broker_waits_until_its_push_should_fill() -> None:
    """64 members, 256 partitions: 26 of a room of 100 came over 26 publishes 5 ms apart;
    filling the rest takes about 370 ms, so the wait is the bound."""
    arrivals = publishes(*(i * 0.005 for i in range(100)))
    count_at_push = arrivals.count - 26
    assert arrivals.filling_linger(26, 100, count_at_push, most_s=0.1, now=LAST) == 0.1
    expected = 26 * 0.005 * (100 / 26 - 1)
    waited = arrivals.filling_linger(26, 100, count_at_push, most_s=1.0, now=LAST)
    assert math.isclose(waited, expected)


def test_a_push_more_than_two_thirds_full_does_not_wait_to_fill() -> None:
    arrivals = publishes(*(i * 0.005 for i in range(100)))
    count_at_push = arrivals.count - 40
    assert arrivals.filling_linger(66, 100, count_at_push, most_s=1.0, now=LAST) > 0
    assert arrivals.filling_linger(67, 100, count_at_push, most_s=1.0, now=LAST) == 0.0


def test_no_filling_wait_without_a_stream_or_a_bound() -> None:
    assert publishes(5.0).filling_linger(1, 100, 0, most_s=0.1, now=5.0) == 0.0  # no gap known
    arrivals = publishes(*(i * 0.005 for i in range(100)))
    assert arrivals.filling_linger(1, 100, arrivals.count - 1, most_s=0.0, now=LAST) == 0.0
    # a bound too short to span half the publishes that brought what is ready
    assert arrivals.filling_linger(20, 100, arrivals.count - 20, most_s=0.04, now=LAST) == 0.0


def test_no_filling_wait_once_publishes_have_stopped() -> None:
    """A backlog draining after the last publish: the events a wait expects won't come."""
    arrivals = publishes(*(i * 0.005 for i in range(100)))
    count_at_push = arrivals.count - 26
    assert arrivals.filling_linger(26, 100, count_at_push, 0.1, now=LAST + 0.019) == 0.1
    assert arrivals.filling_linger(26, 100, count_at_push, 0.1, now=LAST + 0.021) == 0.0


def test_no_filling_wait_for_events_no_publish_brought_since_the_last_push() -> None:
    """Ready after an ack freed their partitions (their elders were in flight): no rate
    of arrival says when more will come."""
    arrivals = publishes(*(i * 0.005 for i in range(100)))
    assert arrivals.filling_linger(3, 100, arrivals.count, 0.1, now=LAST) == 0.0
    assert arrivals.filling_linger(3, 100, arrivals.count - 1, 0.1, now=LAST) > 0
