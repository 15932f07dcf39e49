"""Parsing and firing of the subscriber's fault toggles, with injected sleep and exit."""

from __future__ import annotations

import random

import pytest

from subscriber.faults import CRASH_EXIT_CODE, Faults, FaultSpec, InjectedFailure, parse_fault


@pytest.mark.parametrize(
    "text,spec",
    [
        ("delay:0.15:0.3", FaultSpec("delay", 0.15, seconds=0.3)),
        ("long-delay:1:2", FaultSpec("long-delay", 1.0, seconds=2.0)),
        ("slow:0.5:1.2", FaultSpec("slow", 0.5, seconds=1.2)),
        ("crash-after:4", FaultSpec("crash-after", count=4)),
        ("drop-acks:0.5", FaultSpec("drop-acks", 0.5)),
        ("fail-on:PUB-5", FaultSpec("fail-on", event_id="PUB-5")),
        ("fail-on:a:b", FaultSpec("fail-on", event_id="a:b")),
        ("fail-first:0.25", FaultSpec("fail-first", 0.25)),
    ],
)
def test_parse_round_trips(text: str, spec: FaultSpec) -> None:
    assert parse_fault(text) == spec
    assert parse_fault(str(spec)) == spec


@pytest.mark.parametrize(
    "text,reason",
    [
        ("boom", "unknown fault"),
        ("delay:2:1", "between 0 and 1"),
        ("delay:0.5", "expected 2"),
        ("delay:x:1", "not a number"),
        ("long-delay:1:inf", "finite"),
        ("crash-after:0", ">= 1"),
        ("crash-after:2.5", ">= 1"),
        ("drop-acks:-1", ">= 0"),
        ("fail-on", "needs an event id"),
    ],
)
def test_parse_refuses_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_fault(text)


def test_crash_after_exits_on_the_nth_arrival() -> None:
    exits: list[int] = []
    faults = Faults([parse_fault("crash-after:3")], hard_exit=exits.append)
    for i in range(2):
        faults.before({"id": f"e{i}"})
    assert exits == []
    faults.before({"id": "e2"})
    assert exits == [CRASH_EXIT_CODE]


def test_delay_fires_with_its_probability_on_arrival() -> None:
    slept: list[float] = []
    faults = Faults([parse_fault("delay:0.5:0.2")], random.Random(3), sleep=slept.append)
    for i in range(200):
        faults.before({"id": f"e{i}"})
    assert slept == []  # a delivery delay: not in the handler's path
    faults.on_arrival([{"id": f"e{i}"} for i in range(200)])
    assert set(slept) == {0.2}
    assert 70 < len(slept) < 130


def test_slow_lengthens_the_handler_only() -> None:
    slept: list[float] = []
    faults = Faults([parse_fault("slow:1:1.2")], sleep=slept.append)
    faults.on_arrival([{"id": "e0"}])
    assert slept == []
    faults.before({"id": "e0"})
    assert slept == [1.2]


def test_fail_on_and_drop_acks() -> None:
    faults = Faults([parse_fault("fail-on:bad"), parse_fault("drop-acks:1")])
    faults.check_poison({"id": "good"})
    with pytest.raises(InjectedFailure):
        faults.check_poison({"id": "bad"})
    assert faults.drop_ack({"id": "good"}) is True
    assert Faults([]).drop_ack({"id": "good"}) is False


def test_fail_first_fails_only_a_first_delivery() -> None:
    faults = Faults([parse_fault("fail-first:1")])
    with pytest.raises(InjectedFailure):
        faults.check_poison({"id": "e0", "attempt": 1})
    faults.check_poison({"id": "e0", "attempt": 2})  # the retry succeeds


@pytest.mark.parametrize(
    "text",
    [
        "delay:1:0.2",
        "long-delay:1:0.2",
        "slow:1:0.2",
        "crash-after:1",
        "drop-acks:1",
        "fail-on:e0",
        "fail-first:1",
    ],
)
def test_the_worker_may_skip_the_per_event_hooks_only_of_faults_that_do_nothing_there(
    text: str,
) -> None:
    """A subscriber whose faults say they do nothing around an event skips the three calls
    per event (``around_events``): every kind that acts there must say so."""
    slept: list[float] = []
    exits: list[int] = []
    faults = Faults([parse_fault(text)], sleep=slept.append, hard_exit=exits.append)
    event = {"id": "e0", "attempt": 1}
    faults.before(event)
    try:
        faults.check_poison(event)
        failed = False
    except InjectedFailure:
        failed = True
    acted = bool(slept or exits or failed or faults.drop_ack(event))
    assert faults.around_events is acted
    assert Faults([]).around_events is False
