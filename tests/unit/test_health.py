"""Delay rules with an explicit clock (DESIGN §6)."""

from __future__ import annotations

from channel_server.core.health import Delay, DelayPolicy, DelayTracker

POLICY = DelayPolicy(
    small_delay_s=0.25, long_delay_s=1.0, long_delay_count=3, long_delay_window_s=30.0
)


def test_classify_thresholds_are_exclusive() -> None:
    assert POLICY.classify(0.25) is Delay.NONE
    assert POLICY.classify(0.2501) is Delay.SMALL
    assert POLICY.classify(1.0) is Delay.SMALL
    assert POLICY.classify(1.01) is Delay.LONG


def test_small_delays_are_counted_and_never_offload() -> None:
    tracker = DelayTracker(POLICY)
    verdicts = [tracker.observe(0.5, now=float(t)) for t in range(10)]
    assert verdicts == [(Delay.SMALL, False)] * 10
    assert (tracker.small, tracker.long) == (10, 0)


def test_third_long_delay_within_the_window_offloads_once() -> None:
    tracker = DelayTracker(POLICY)
    assert tracker.observe(2.0, now=0.0) == (Delay.LONG, False)
    assert tracker.observe(2.0, now=10.0) == (Delay.LONG, False)
    assert tracker.observe(2.0, now=20.0) == (Delay.LONG, True)
    # the window starts again after an offload
    assert tracker.observe(2.0, now=21.0) == (Delay.LONG, False)
    assert tracker.long == 4


def test_long_delays_outside_the_window_do_not_add_up() -> None:
    tracker = DelayTracker(POLICY)
    assert tracker.observe(2.0, now=0.0)[1] is False
    assert tracker.observe(2.0, now=20.0)[1] is False
    assert tracker.observe(2.0, now=40.5)[1] is False  # the one at 0.0 has expired
    assert tracker.observe(2.0, now=45.0)[1] is True


def test_fast_round_trips_change_nothing() -> None:
    tracker = DelayTracker(POLICY)
    tracker.observe(2.0, now=0.0)
    tracker.observe(2.0, now=1.0)
    assert tracker.observe(0.01, now=2.0) == (Delay.NONE, False)
    assert tracker.observe(2.0, now=3.0) == (Delay.LONG, True)
