"""Publisher.submit's pipeline: how submissions are grouped into sends, how a reply is
shared out among them, and how refusals land only where they belong (a fake channel: a
function that records each batch and answers as scripted)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any

import pytest

from channel_server.errors import BrokerUnavailable, InvalidEvent, QueueFull
from publisher import pipeline as pipeline_module
from publisher.pipeline import SendPipeline, Submission, settle, take_send
from tests.integration.procs import wait_until

WAIT_S = 10.0


def ev(event_id: str, publisher_id: str = "p") -> dict[str, Any]:
    return {"id": event_id, "publisher_id": publisher_id, "partition": 0, "timestamp": 1.0}


def subs(*sizes: int) -> deque[Submission]:
    n = iter(range(10_000))
    return deque(Submission([ev(f"e{next(n)}") for _ in range(size)]) for size in sizes)


def test_a_send_takes_whole_submissions_up_to_the_limit() -> None:
    queue = subs(2, 3, 4, 1)
    assert [len(s.events) for s in take_send(queue, max_events=6)] == [2, 3]
    assert [len(s.events) for s in take_send(queue, max_events=6)] == [4, 1]
    assert not queue


def test_a_submission_larger_than_the_limit_goes_alone_and_whole() -> None:
    queue = subs(9, 1)
    assert [len(s.events) for s in take_send(queue, max_events=6)] == [9]
    assert [len(s.events) for s in take_send(queue, max_events=6)] == [1]


def test_a_send_carries_a_bounded_number_of_payload_bytes() -> None:
    queue = deque(Submission([ev(f"e{n}")], size=3) for n in range(5))
    assert len(take_send(queue, max_bytes=7)) == 2
    big = deque([Submission([ev("big")], size=100), Submission([ev("next")], size=1)])
    assert [s.events[0]["id"] for s in take_send(big, max_bytes=7)] == ["big"]  # alone


def test_a_submission_repeating_an_id_of_the_send_waits_for_the_next_send() -> None:
    queue = deque([Submission([ev("a")]), Submission([ev("b")]), Submission([ev("a")])])
    assert [s.events[0]["id"] for s in take_send(queue)] == ["a", "b"]
    assert [s.events[0]["id"] for s in take_send(queue)] == ["a"]


def test_a_reply_is_shared_out_among_the_submissions_of_its_send() -> None:
    a = Submission([ev("a1"), ev("a2")])
    b = Submission([ev("b1"), ev("b2"), ev("b3")])
    settle([a, b], duplicates=["a2"], refused={"b2", "b3"}, unrouted=False)
    assert (a.accepted, a.duplicates, a.events) == (1, ["a2"], [])
    assert (b.accepted, b.duplicates, [e["id"] for e in b.events]) == (1, [], ["b2", "b3"])
    settle([b], duplicates=[], refused=set(), unrouted=False)  # the refused ones, again
    assert b.summary() == {"accepted": 3, "duplicates": [], "refused": 0, "unrouted": 0}


def test_a_topic_with_no_group_counts_the_fresh_events_as_unrouted() -> None:
    a = Submission([ev("a1"), ev("a2")])
    settle([a], duplicates=["a1"], refused=set(), unrouted=True)
    assert a.summary() == {"accepted": 0, "duplicates": ["a1"], "refused": 0, "unrouted": 1}


class FakeChannel:
    """Records each batch; the first send can be held until ``release`` so that later
    submissions queue up behind it; ``answer(batch)`` scripts the reply."""

    def __init__(self, answer: Any = None, hold_first: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.answer = answer
        self.release = threading.Event()
        self.holding = threading.Event()
        if not hold_first:
            self.release.set()

    def __call__(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        self.batches.append([e["id"] for e in batch])
        if len(self.batches) == 1:
            self.holding.set()
            assert self.release.wait(WAIT_S)
        if self.answer is not None:
            return self.answer(batch)
        return {"accepted": len(batch), "duplicates": [], "refused": 0, "unrouted": 0}


def held_pipeline(channel: FakeChannel) -> tuple[SendPipeline, Future[dict[str, Any]]]:
    """A pipeline whose first send (of event ``first``) is under way and held."""
    pipeline = SendPipeline(channel, "test-sender")
    first = pipeline.submit([ev("first")], None)
    assert channel.holding.wait(WAIT_S)
    return pipeline, first


def test_submissions_made_during_a_send_go_together_in_the_next_one_in_order() -> None:
    channel = FakeChannel(hold_first=True)
    pipeline, first = held_pipeline(channel)
    futures = [pipeline.submit([ev(f"e{n}")], None) for n in range(5)]
    channel.release.set()
    assert pipeline.flush(WAIT_S)
    assert channel.batches == [["first"], [f"e{n}" for n in range(5)]]
    assert [f.result()["accepted"] for f in (first, *futures)] == [1] * 6
    pipeline.close(WAIT_S)


def test_an_invalid_event_fails_only_its_own_submission() -> None:
    def answer(batch: list[dict[str, Any]]) -> dict[str, Any]:
        for index, event in enumerate(batch):
            if event["id"] == "bad":
                raise InvalidEvent("timestamp", "must be a number", index)
        return {"accepted": len(batch), "duplicates": [], "refused": 0, "unrouted": 0}

    channel = FakeChannel(answer, hold_first=True)
    pipeline, _ = held_pipeline(channel)
    good1 = pipeline.submit([ev("g1")], None)
    bad = pipeline.submit([ev("g2"), ev("bad")], None)
    good2 = pipeline.submit([ev("g3")], None)
    channel.release.set()
    assert pipeline.flush(WAIT_S)
    assert (good1.result()["accepted"], good2.result()["accepted"]) == (1, 1)
    with pytest.raises(InvalidEvent) as refused:
        bad.result()
    assert refused.value.index == 1  # its place in its own submission
    assert channel.batches[1:] == [["g1", "g2", "bad", "g3"], ["g1"], ["g2", "bad"], ["g3"]]
    pipeline.close(WAIT_S)


def full_once(batch: list[dict[str, Any]], state: dict[str, bool]) -> dict[str, Any]:
    """The first batch of two or more fits only its first event."""
    if len(batch) > 1 and not state.get("full"):
        state["full"] = True
        ids = [e["id"] for e in batch]
        raise QueueFull("c", 1, accepted=1, refused_ids=ids[1:], retry_after_s=0.01)
    return {"accepted": len(batch), "duplicates": [], "refused": 0, "unrouted": 0}


def test_a_full_channel_is_waited_out_and_the_refused_events_go_before_later_ones() -> None:
    state: dict[str, bool] = {}
    channel = FakeChannel(lambda batch: full_once(batch, state), hold_first=True)
    pipeline, _ = held_pipeline(channel)
    a = pipeline.submit([ev("a1"), ev("a2")], None)
    b = pipeline.submit([ev("b1")], None)
    channel.release.set()
    assert pipeline.flush(WAIT_S)
    assert channel.batches[1:] == [["a1", "a2", "b1"], ["a2", "b1"]]
    assert (a.result()["accepted"], b.result()["accepted"]) == (2, 1)
    pipeline.close(WAIT_S)


def test_closing_while_the_channel_is_full_fails_the_refused_with_queue_full() -> None:
    def always_full(batch: list[dict[str, Any]]) -> dict[str, Any]:
        raise QueueFull("c", 0, accepted=0, refused_ids=[e["id"] for e in batch], retry_after_s=60)

    channel = FakeChannel(always_full)
    pipeline = SendPipeline(channel, "test-sender")
    waiting = pipeline.submit([ev("a")], None)
    wait_until(lambda: len(channel.batches) == 1, what="the first send")
    pipeline.close(WAIT_S)  # does not wait the 60 s out
    with pytest.raises(QueueFull):
        waiting.result(timeout=0)


def test_a_channel_that_stays_away_fails_what_was_being_sent_and_the_next_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = iter([BrokerUnavailable("channel c", "gone"), None])

    def answer(batch: list[dict[str, Any]]) -> dict[str, Any]:
        if (exc := next(calls)) is not None:
            raise exc
        return {"accepted": len(batch), "duplicates": [], "refused": 0, "unrouted": 0}

    channel = FakeChannel(answer)
    pipeline = SendPipeline(channel, "test-sender")
    with caplog.at_level(logging.WARNING, logger="publisher.pipeline"):
        lost = pipeline.submit([ev("a")], None)
        with pytest.raises(BrokerUnavailable):
            lost.result(timeout=WAIT_S)
    # said in the log too, for a caller that never looks at its futures
    assert "test-sender: 1 submitted events not stored: BrokerUnavailable" in caplog.text
    assert pipeline.submit([ev("b")], None).result(timeout=WAIT_S)["accepted"] == 1
    pipeline.close(WAIT_S)


def test_a_submission_cancelled_before_its_send_is_not_sent() -> None:
    channel = FakeChannel(hold_first=True)
    pipeline, _ = held_pipeline(channel)
    dropped = pipeline.submit([ev("x")], None)
    kept = pipeline.submit([ev("y")], None)
    assert dropped.cancel()
    channel.release.set()
    assert kept.result(timeout=WAIT_S)["accepted"] == 1
    assert channel.batches == [["first"], ["y"]]
    pipeline.close(WAIT_S)


def test_submit_waits_for_room_and_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("publisher.pipeline.PENDING_MAX_EVENTS", 2)
    channel = FakeChannel(hold_first=True)
    pipeline, _ = held_pipeline(channel)
    pipeline.submit([ev("a"), ev("b")], None)
    with pytest.raises(TimeoutError, match="2 events wait to be sent"):
        pipeline.submit([ev("c")], 0.05)
    channel.release.set()
    assert pipeline.submit([ev("c")], WAIT_S).result(timeout=WAIT_S)["accepted"] == 1
    pipeline.close(WAIT_S)


def test_submit_waits_while_the_payload_bytes_waiting_reach_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("publisher.pipeline.PENDING_MAX_BYTES", 1000)
    channel = FakeChannel(hold_first=True)
    pipeline, _ = held_pipeline(channel)
    big = {**ev("big"), "payload": "x" * 5000}  # over the bound alone: goes, none waits
    pipeline.submit([big], None)
    with pytest.raises(TimeoutError):
        pipeline.submit([ev("small")], 0.05)
    channel.release.set()
    assert pipeline.submit([ev("small")], WAIT_S).result(timeout=WAIT_S)["accepted"] == 1
    pipeline.close(WAIT_S)


def test_a_closed_pipeline_refuses_submissions_and_its_thread_ends() -> None:
    pipeline = SendPipeline(FakeChannel(), "test-sender")
    pipeline.submit([ev("a")], None).result(timeout=WAIT_S)
    pipeline.close(WAIT_S)
    with pytest.raises(ValueError, match="closed"):
        pipeline.submit([ev("b")], None)
    assert not any(t.name == "test-sender" for t in threading.enumerate())


@pytest.mark.parametrize(
    ("events", "field", "index"),
    [({"id": "a"}, "batch", -1), ([ev("a"), "b"], "id", 1), ([{"id": 7}], "id", 0)],
)
def test_a_batch_the_sender_cannot_read_is_refused_at_once(
    events: Any, field: str, index: int
) -> None:
    channel = FakeChannel()
    pipeline = SendPipeline(channel, "test-sender")
    with pytest.raises(InvalidEvent) as refused:
        pipeline.submit(events, None)
    assert (refused.value.field, refused.value.index) == (field, index)
    assert pipeline.submit([ev("ok")], None).result(timeout=WAIT_S)["accepted"] == 1
    pipeline.close(WAIT_S)


def test_a_caller_reusing_its_event_dict_sends_what_it_submitted() -> None:
    channel = FakeChannel(hold_first=True)
    pipeline, _ = held_pipeline(channel)
    event = ev("a")
    first = pipeline.submit([event], None)
    event["id"] = "b"  # reused for the next event before the first is sent
    second = pipeline.submit([event], None)
    channel.release.set()
    assert first.result(timeout=WAIT_S)["accepted"] == second.result(timeout=WAIT_S)["accepted"]
    assert channel.batches[1] == ["a", "b"]
    pipeline.close(WAIT_S)


def test_a_submission_repeating_its_own_id_counts_the_copies_as_duplicates() -> None:
    a = Submission([ev("a"), ev("a"), ev("b")])
    settle([a], duplicates=["a"], refused=set(), unrouted=False)  # as the channel answers
    assert a.summary() == {"accepted": 2, "duplicates": ["a"], "refused": 0, "unrouted": 0}
    full = Submission([ev("c"), ev("c")])
    settle([full], duplicates=["c"], refused={"c"}, unrouted=False)
    assert (full.accepted, full.duplicates, [e["id"] for e in full.events]) == (0, ["c"], ["c"])


def test_a_callback_that_flushes_or_closes_is_refused_instead_of_waiting_for_itself() -> None:
    channel = FakeChannel(hold_first=True)
    pipeline, future = held_pipeline(channel)
    errors: list[BaseException] = []

    def callback(_: Future[dict[str, Any]]) -> None:
        for wait in (lambda: pipeline.flush(WAIT_S), lambda: pipeline.close(WAIT_S)):
            try:
                wait()
            except RuntimeError as exc:
                errors.append(exc)

    future.add_done_callback(callback)  # before it is done: it runs on the sender
    channel.release.set()
    wait_until(lambda: len(errors) == 2, what="the callback's refusals")
    assert all("callback" in str(exc) for exc in errors)
    assert pipeline.submit([ev("b")], None).result(timeout=WAIT_S)["accepted"] == 1
    pipeline.close(WAIT_S)


def test_a_callback_submits_at_once_while_the_queue_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A future's callback that submits (an audit event per event stored) waited for room
    that only the sender thread, the one running it, makes: both waited for good."""
    monkeypatch.setattr("publisher.pipeline.PENDING_MAX_EVENTS", 2)
    channel = FakeChannel(hold_first=True)
    pipeline, future = held_pipeline(channel)
    audits: list[Future[dict[str, Any]]] = []
    future.add_done_callback(lambda _: audits.append(pipeline.submit([ev("audit")], None)))
    pipeline.submit([ev("a"), ev("b")], None)  # the queue is full behind the held send
    channel.release.set()
    wait_until(lambda: audits, what="the callback's submission")
    assert audits[0].result(timeout=WAIT_S)["accepted"] == 1
    assert pipeline.flush(WAIT_S)
    pipeline.close(WAIT_S)


def test_closing_while_full_gives_each_submission_its_own_counts() -> None:
    def front_only(batch: list[dict[str, Any]]) -> dict[str, Any]:
        ids = [e["id"] for e in batch]
        fits = 1 if ids[0] == "a1" else 0  # room for the first event sent, then none
        raise QueueFull("c", 1, accepted=fits, refused_ids=ids[fits:], retry_after_s=60)

    channel = FakeChannel(front_only, hold_first=True)
    pipeline, first = held_pipeline(channel)
    a = pipeline.submit([ev("a1"), ev("a2")], None)
    b = pipeline.submit([ev("b1")], None)
    channel.release.set()  # "first" is refused whole, and waits out the full channel
    pipeline.close(WAIT_S)  # then a1 fits, a2 and b1 do not: no more waiting
    assert channel.batches == [["first"], ["a1", "a2", "b1"]]
    errors = [f.exception(timeout=0) for f in (first, a, b)]
    assert [(e.accepted, e.refused_ids) for e in errors] == [
        (0, ["first"]),
        (1, ["a2"]),
        (0, ["b1"]),
    ]


IDLE_FOR_S = 3600.0
"""The sender's idle wait in the test: a wake that came only when it ended never comes."""


def test_an_idle_sender_sleeps_until_a_submission_or_a_close_wakes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With nothing submitted the sender waits long (an idle publisher costs no CPU), and
    a submission, then a close, wake it: neither waits for the wait to end."""
    monkeypatch.setattr(pipeline_module, "WAIT_SLICE_S", IDLE_FOR_S)
    pipeline = SendPipeline(FakeChannel(), "test-sender")
    waits: list[float | None] = []
    wait = pipeline._cond.wait

    def watched(timeout: float | None = None) -> bool:
        waits.append(timeout)
        return wait(timeout)

    pipeline._cond.wait = watched  # type: ignore[method-assign]
    pipeline.submit([ev("a")], None).result(timeout=WAIT_S)
    wait_until(lambda: waits, WAIT_S, "the sender never went idle")
    assert pipeline.submit([ev("b")], None).result(timeout=30.0)["accepted"] == 1
    pipeline.close(30.0)
    assert not any(t.name == "test-sender" for t in threading.enumerate())
    assert set(waits) == {IDLE_FOR_S}
