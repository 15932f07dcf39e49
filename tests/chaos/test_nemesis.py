"""The fault schedule is a pure function of the seed and keeps its promises."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tests.chaos.nemesis import (
    BROKER,
    BROKER_STOP_S,
    CLOCK,
    CLOCK_STEP_S,
    CLOCK_STEPS_MAX,
    KINDS,
    TAKEOVER,
    TAKEOVER_S,
    ZOMBIE_RUN_S,
    broker_stops,
    clock_steps,
    schedule,
    takeovers,
)

SUBS = ("s1", "s2", "s3")
STREAM_S = 12.0
DURATIONS = {
    "sub-kill": (0.5, 2.0),
    "broker-kill": (0.5, 2.0),
    "sub-stop": (1.0, 8.0),
    "drop-acks": (2.0, 5.0),
    "sub-term": (0.0, 0.0),
}


@given(st.integers(min_value=0, max_value=2**32))
def test_the_same_seed_gives_the_same_schedule(seed: int) -> None:
    assert schedule(seed, STREAM_S, SUBS) == schedule(seed, STREAM_S, SUBS)


@given(st.integers(min_value=0, max_value=2**32))
def test_a_schedule_keeps_its_bounds(seed: int) -> None:
    faults = schedule(seed, STREAM_S, SUBS)
    assert 3 <= len(faults) <= 6
    assert faults == sorted(faults, key=lambda f: (f.at, f.target))
    for f in faults:
        assert f.kind in KINDS
        assert (f.target == BROKER) == (f.kind == "broker-kill")
        assert f.target in (*SUBS, BROKER)
        assert 0.05 * STREAM_S - 0.001 <= f.at <= 0.7 * STREAM_S + 0.001
        if f.kind == "crash-after":
            assert 5 <= f.count <= 30
        else:
            low, high = DURATIONS[f.kind]
            assert low - 0.001 <= f.duration <= high + 0.001
    for a, b in itertools.combinations(faults, 2):
        if a.target == b.target:  # one process is never hit by two faults at once
            assert a.busy[1] <= b.busy[0] or b.busy[1] <= a.busy[0]


def test_seeds_differ_and_every_kind_is_drawn() -> None:
    schedules = [schedule(seed, STREAM_S, SUBS) for seed in range(50)]
    assert len({tuple(s) for s in schedules}) == 50
    assert {f.kind for s in schedules for f in s} == set(KINDS)


@given(st.integers(min_value=0, max_value=2**32))
def test_clock_steps_are_a_pure_function_of_the_seed_within_the_proof_window(seed: int) -> None:
    steps = clock_steps(seed, STREAM_S)
    assert steps == clock_steps(seed, STREAM_S)
    assert len(steps) <= CLOCK_STEPS_MAX
    assert steps == sorted(steps, key=lambda f: f.at)
    for step in steps:
        assert (step.kind, step.target) == (CLOCK, CLOCK)
        assert CLOCK_STEP_S[0] - 0.1 <= abs(step.shift) <= CLOCK_STEP_S[1] + 0.1
        assert 0.05 * STREAM_S - 0.001 <= step.at <= 0.7 * STREAM_S + 0.001


def test_some_seeds_step_the_clock_back_and_some_forward() -> None:
    shifts = [step.shift for seed in range(50) for step in clock_steps(seed, STREAM_S)]
    assert min(shifts) < 0 < max(shifts)
    assert any(not clock_steps(seed, STREAM_S) for seed in range(50))  # and some do not


@given(st.integers(min_value=0, max_value=2**32))
def test_a_broker_stop_never_overlaps_the_brokers_other_faults(seed: int) -> None:
    faults = schedule(seed, STREAM_S, SUBS)
    stops = broker_stops(seed, STREAM_S, faults)
    assert stops == broker_stops(seed, STREAM_S, faults)
    for stop in stops:
        assert (stop.kind, stop.target) == ("broker-stop", BROKER)
        assert BROKER_STOP_S[0] - 0.001 <= stop.duration <= BROKER_STOP_S[1] + 0.001
        for f in faults:
            if f.target == BROKER:
                assert f.busy[1] <= stop.busy[0] or stop.busy[1] <= f.busy[0]


def test_many_runs_stop_the_broker() -> None:
    runs = [broker_stops(seed, STREAM_S, schedule(seed, STREAM_S, SUBS)) for seed in range(50)]
    assert 10 <= sum(map(len, runs)) < 50  # (some would overlap a broker kill)


@given(st.integers(min_value=0, max_value=2**32))
def test_a_takeover_never_overlaps_its_subscribers_other_faults(seed: int) -> None:
    faults = schedule(seed, STREAM_S, SUBS)
    found = takeovers(seed, STREAM_S, faults, SUBS)
    assert found == takeovers(seed, STREAM_S, faults, SUBS)
    for fault in found:
        assert fault.kind == TAKEOVER and fault.target in SUBS
        assert TAKEOVER_S[0] - 0.001 <= fault.duration <= TAKEOVER_S[1] + 0.001
        busy = (fault.busy[0], fault.busy[1] + ZOMBIE_RUN_S)
        for f in faults:
            if f.target == fault.target:
                assert f.busy[1] <= busy[0] or busy[1] <= f.busy[0]


def test_many_runs_take_a_subscribers_id_over() -> None:
    runs = [takeovers(seed, STREAM_S, schedule(seed, STREAM_S, SUBS), SUBS) for seed in range(50)]
    assert 5 <= sum(map(len, runs)) <= 40  # (in some, every subscriber is busy then)
