"""Issue 14: status shows how fast events flow now, beside the totals. A RateWindow of
(time, accepted, acknowledged) samples, driven with a fake clock."""

from __future__ import annotations

import pytest

from channel_server.channel_stats import MAX_RATE_SAMPLES, RateWindow
from channel_server.status import rates_line


def test_no_rate_before_the_first_sample() -> None:
    window = RateWindow(10.0)
    assert window.rates(5.0, 100, 90) is None


def test_the_rate_runs_from_the_first_sample_until_the_window_is_full() -> None:
    window = RateWindow(10.0)
    window.sample(0.0, 0, 0)
    assert window.rates(0.0, 0, 0) is None  # no time has passed
    assert window.rates(4.0, 40, 20) == {
        "interval_s": 4.0,
        "accepted_per_s": 10.0,
        "acked_per_s": 5.0,
    }


def test_the_rate_covers_the_last_window_only() -> None:
    # 100 ev/s for 20 s, then nothing in but acks catching up at 50 ev/s
    window = RateWindow(10.0)
    accepted = acked = 0
    seen = {}
    for second in range(31):
        window.sample(float(second), accepted, acked)
        seen[second] = window.rates(float(second), accepted, acked)
        if second < 20:
            accepted += 100
        acked += 50
    assert seen[10] == {"interval_s": 10.0, "accepted_per_s": 100.0, "acked_per_s": 50.0}
    assert seen[25] == {"interval_s": 10.0, "accepted_per_s": 50.0, "acked_per_s": 50.0}
    assert seen[30] == {"interval_s": 10.0, "accepted_per_s": 0.0, "acked_per_s": 50.0}


def test_between_samples_the_interval_is_as_long_as_it_really_is() -> None:
    window = RateWindow(10.0)
    for second in range(12):
        window.sample(float(second), 10 * second, 10 * second)
    rates = window.rates(12.5, 125, 125)  # the newest sample at least 10 s old: 2 s
    assert rates == {"interval_s": 10.5, "accepted_per_s": 10.0, "acked_per_s": 10.0}


def test_a_replay_never_shows_a_negative_rate() -> None:
    window = RateWindow(10.0)
    window.sample(0.0, 10, 10)
    assert window.rates(2.0, 10, 7)["acked_per_s"] == 0.0


def test_samples_are_bounded_whatever_the_span() -> None:
    window = RateWindow(1e9)
    for second in range(MAX_RATE_SAMPLES + 50):
        window.sample(float(second), second, second)
    assert len(window._samples) == MAX_RATE_SAMPLES
    assert window.rates(float(MAX_RATE_SAMPLES + 50), 0, 0)["interval_s"] == pytest.approx(
        MAX_RATE_SAMPLES
    )


@pytest.mark.parametrize(
    "rates,line",
    [
        (
            {"interval_s": 10.2, "accepted_per_s": 12.34, "acked_per_s": 11.9},
            "12.3 ev/s in, 11.9 ev/s acked over the last 10 s",
        ),
        (
            {"interval_s": 3.0, "accepted_per_s": 0.0, "acked_per_s": 2.5},
            "0.0 ev/s in, 2.5 ev/s acked over the last 3.0 s",
        ),
        (None, "rates: not measured yet (the broker samples its counts every second)"),
    ],
)
def test_status_says_the_rates_in_one_line(rates: dict | None, line: str) -> None:
    assert rates_line(rates) == line
