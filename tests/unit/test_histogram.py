"""The fixed-bucket histogram the groups and the store writes keep."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channel_server.core.histogram import LATENCY_BUCKETS_S, STORE_BUCKETS_S, Histogram


def test_values_land_in_the_first_bucket_that_holds_them_cumulatively() -> None:
    hist = Histogram((0.01, 0.1, 1.0))
    hist.observe_ages(10.0, [9.995, 9.99, 9.95, 9.5, 7.0])
    assert hist.to_dict() == {
        "buckets": [[0.01, 2], [0.1, 3], [1.0, 4], ["+Inf", 5]],
        "count": 5,
        "sum": pytest.approx(3.565),
    }


def test_empty_histogram_reads_zero_everywhere() -> None:
    data = Histogram(STORE_BUCKETS_S).to_dict()
    assert data["count"] == 0 and data["sum"] == 0
    assert [n for _, n in data["buckets"]] == [0] * (len(STORE_BUCKETS_S) + 1)


@pytest.mark.parametrize("bounds", [(), (1.0, 0.5), (0.1, 0.1)])
def test_bounds_must_increase(bounds: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        Histogram(bounds)


def test_default_bounds_are_valid() -> None:
    assert Histogram(LATENCY_BUCKETS_S).bounds[0] == 0.001


SHARED_STARTS = st.sampled_from([0.0, 1.0, 50.0, 99.5, 99.999, 100.0])


@given(st.lists(SHARED_STARTS | st.floats(0, 100), max_size=60))
def test_observing_ages_at_once_is_observing_each(starts: list[float]) -> None:
    """Starts repeat (an ack's events share their publishes' accept times); 0 is unknown
    and skipped."""
    at_once, each = Histogram(LATENCY_BUCKETS_S), Histogram(LATENCY_BUCKETS_S)
    at_once.observe_ages(100.0, iter(starts))
    for start in starts:
        if start:
            each.observe(100.0 - start)
    assert (at_once.counts, at_once.count) == (each.counts, each.count)
    assert at_once.sum == pytest.approx(each.sum)
