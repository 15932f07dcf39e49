"""after_reply: what a served call defers runs once the block around it ends, in order."""

from __future__ import annotations

import pytest

from channel_server import after_reply


def test_outside_a_served_request_nothing_is_deferred() -> None:
    ran: list[str] = []
    assert after_reply.defer(lambda: ran.append("x")) is False
    assert ran == []


def test_deferred_work_runs_after_the_block_in_order_even_past_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    def fail() -> None:
        raise RuntimeError("boom")

    with after_reply.serving():
        assert after_reply.defer(lambda: ran.append("first"))
        assert after_reply.defer(fail)
        assert after_reply.defer(lambda: ran.append("third"))
        assert ran == []
    assert ran == ["first", "third"]
    assert "work after a reply failed" in caplog.text
    assert after_reply.defer(lambda: ran.append("late")) is False  # the request is over


def test_deferred_work_runs_when_the_request_raises() -> None:
    ran: list[str] = []
    with pytest.raises(ValueError), after_reply.serving():
        after_reply.defer(lambda: ran.append("pushed"))
        raise ValueError("the reply could not be sent")
    assert ran == ["pushed"]


def test_work_deferred_while_deferred_work_runs_is_not_kept() -> None:
    """A task that makes more work (the push's next one) hands it on itself."""
    ran: list[bool] = []
    with after_reply.serving():
        after_reply.defer(lambda: ran.append(after_reply.defer(lambda: None)))
    assert ran == [False]
