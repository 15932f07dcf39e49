"""The stores' maintenance thread lives through whatever one round raises: a thread ended by
an unexpected error (a bug, no memory) would leave acks deferred in memory for good."""

from __future__ import annotations

import logging
import threading

import pytest

from channel_server.store.deferred import write_in_background

DEADLINE_S = 10.0


@pytest.mark.parametrize("error", [RuntimeError("a bug"), OSError("disk away")])
def test_a_failed_round_is_logged_once_and_the_next_rounds_still_run(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    stop = threading.Event()
    rounds: list[int] = []
    went_on = threading.Event()

    def write(round_no: int) -> None:
        rounds.append(round_no)
        if round_no <= 2:
            raise error
        if round_no >= 4:
            went_on.set()

    thread = threading.Thread(
        target=write_in_background, args=(stop, 0.001, write, "the store", (OSError,))
    )
    with caplog.at_level(logging.WARNING):
        thread.start()
        try:
            assert went_on.wait(DEADLINE_S)
        finally:
            stop.set()
            thread.join(DEADLINE_S)
    assert not thread.is_alive() and rounds[:4] == [1, 2, 3, 4]
    failed = [r for r in caplog.records if "fail (retrying)" in r.getMessage()]
    assert len(failed) == 1 and str(error) in failed[0].getMessage()
    assert bool(failed[0].exc_info) == (not isinstance(error, OSError))  # a bug: its trace
    assert any("work again" in r.getMessage() for r in caplog.records)
