"""The channel's clock reads the wall clock once and runs on the monotonic clock."""

from __future__ import annotations

import time

import pytest

from channel_server import steady_clock


def test_it_starts_at_the_wall_clock() -> None:
    assert abs(steady_clock.steady_time() - time.time()) < 1.0


def test_a_step_of_the_wall_clock_does_not_move_it(monkeypatch: pytest.MonkeyPatch) -> None:
    before = steady_clock.steady_time()
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 3600.0)  # stepped an hour on
    assert steady_clock.steady_time() - before < 1.0


def test_it_runs_with_the_monotonic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    start = time.monotonic()
    before = steady_clock.steady_time()
    monkeypatch.setattr(time, "monotonic", lambda: start + 90.0)
    assert steady_clock.steady_time() == pytest.approx(before + 90.0, abs=0.5)
