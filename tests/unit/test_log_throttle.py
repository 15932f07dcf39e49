"""A warning that repeats is logged once per interval per kind, counting what was left out."""

from __future__ import annotations

import logging

import pytest

from channel_server.log_throttle import Throttle

LOGGER = "test.throttle"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_repeated_warning_is_logged_once_per_interval_with_the_count_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    throttle = Throttle(logging.getLogger(LOGGER), every_s=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, LOGGER):
        for _ in range(5):  # 5 in the first second: 1 logged
            throttle.warning("push", "pushing to %s failed", "s1")
            clock.now += 0.2
        clock.now = 110.0
        throttle.warning("push", "pushing to %s failed", "s1")
    assert messages(caplog) == [
        "pushing to s1 failed",
        "pushing to s1 failed (4 more since the last report)",
    ]


def test_kinds_are_throttled_apart(caplog: pytest.LogCaptureFixture) -> None:
    throttle = Throttle(logging.getLogger(LOGGER), every_s=10.0, clock=Clock())
    with caplog.at_level(logging.WARNING, LOGGER):
        throttle.warning("frame", "a frame")
        throttle.warning("accept", "an accept")
        throttle.warning("frame", "a frame")
    assert messages(caplog) == ["a frame", "an accept"]


def test_an_error_with_its_traceback_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    throttle = Throttle(logging.getLogger(LOGGER), clock=Clock())
    with caplog.at_level(logging.WARNING, LOGGER):
        try:
            raise RuntimeError("row 7 is gone")
        except RuntimeError:
            throttle.error("push", "pushing failed", exc_info=True)
            throttle.error("push", "pushing failed", exc_info=True)
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and "row 7 is gone" in str(record.exc_info[1])


def test_info_is_throttled_the_same_way_at_its_own_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    throttle = Throttle(logging.getLogger(LOGGER), every_s=60.0, clock=clock)
    with caplog.at_level(logging.INFO, LOGGER):
        for _ in range(3):  # a broker going busy every second or so
            throttle.info("busy", "busy now")
            clock.now += 1.0
    assert messages(caplog) == ["busy now"]
    assert {r.levelno for r in caplog.records if r.name == LOGGER} == {logging.INFO}
