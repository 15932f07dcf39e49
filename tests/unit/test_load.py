"""How busy the broker is on its CPU: a sliding window of wall time, fake CPU seconds."""

from __future__ import annotations

import math

from channel_server.core.load import SHARED_SHARE, STEP_S, WINDOW_S, CpuLoad, unknown_machine


class FakeCpu:
    """CPU seconds the test sets; counts how often they are read."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.seconds


def test_nothing_is_known_before_a_step_has_passed() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu, unknown_machine)
    cpu.seconds = 0.9
    load.observe(100.0 + STEP_S / 2, cpu, unknown_machine)
    assert load.share == 0.0
    assert not load.busy(0.5)


def test_the_cpu_is_read_once_per_step_not_per_observation() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    for i in range(1000):  # one second of publishes a millisecond apart
        load.observe(100.0 + i * 0.001, cpu, unknown_machine)
    assert cpu.reads == round(WINDOW_S / STEP_S)
    load.observe(100.0 + WINDOW_S, cpu, unknown_machine)
    assert cpu.reads == round(WINDOW_S / STEP_S) + 1


def test_a_burst_makes_the_broker_busy_within_a_step() -> None:
    # Given a broker that has just started (no window of history yet)
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu, unknown_machine)
    # When a flood of publishes keeps it on its CPU for one step
    cpu.seconds = STEP_S * 0.9
    load.observe(100.0 + STEP_S, cpu, unknown_machine)
    # Then it is busy now, not a second later
    assert math.isclose(load.share, 0.9)
    assert load.busy(0.8)


def test_a_burst_after_a_quiet_spell_is_not_diluted_by_it() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu, unknown_machine)
    load.observe(160.0, cpu, unknown_machine)  # a minute without publishes
    cpu.seconds = STEP_S
    load.observe(160.0 + STEP_S, cpu, unknown_machine)  # then a core's worth at once
    assert math.isclose(load.share, 1.0)


def test_the_share_is_over_the_last_window_only() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    now = 100.0
    load.observe(now, cpu, unknown_machine)
    for _ in range(8):  # two windows at one core
        now += STEP_S
        cpu.seconds += STEP_S
        load.observe(now, cpu, unknown_machine)
    for _ in range(round(WINDOW_S / STEP_S)):  # then a window idle
        now += STEP_S
        load.observe(now, cpu, unknown_machine)
    assert load.share == 0.0


def test_a_window_of_one_core_is_busy() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu, unknown_machine)
    cpu.seconds = 0.8
    load.observe(101.0, cpu, unknown_machine)
    assert math.isclose(load.share, 0.8)
    assert load.busy(0.75)
    assert not load.busy(0.9)


def test_a_long_idle_spell_shows_as_one_long_quiet_window() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu, unknown_machine)
    cpu.seconds = 1.0
    load.observe(101.0, cpu, unknown_machine)
    assert load.busy(0.75)
    cpu.seconds = 1.1
    load.observe(161.0, cpu, unknown_machine)  # a minute without publishes
    assert math.isclose(load.share, 0.1 / 60.0)
    assert not load.busy(0.75)


def test_a_threshold_of_zero_is_never_busy() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu, unknown_machine)
    cpu.seconds = 2.0
    load.observe(101.0, cpu, unknown_machine)
    assert load.busy(1.5)
    assert not load.busy(0.0)


def test_a_wall_clock_stepping_back_starts_the_window_again() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu, unknown_machine)
    cpu.seconds = 5.0
    load.observe(50.0, cpu, unknown_machine)  # stepped back: no share from a negative span
    assert load.share == 0.0
    cpu.seconds = 5.5
    load.observe(51.0, cpu, unknown_machine)
    assert math.isclose(load.share, 0.5)


class FakeMachine:
    """The machine's CPU times the test sets: (in use, in all)."""

    def __init__(self) -> None:
        self.times: tuple[float, float] | None = (0.0, 0.0)

    def __call__(self) -> tuple[float, float] | None:
        return self.times

    def run(self, in_use: float, total: float) -> None:
        if self.times is not None:  # (unknown times stay unknown)
            self.times = (self.times[0] + in_use, self.times[1] + total)


def windows(load: CpuLoad, cpu: FakeCpu, machine: FakeMachine, share: float, used: float) -> None:
    """One second in which the process used ``share`` of a core and the machine's two
    CPUs ``used`` of their time."""
    load.observe(100.0, cpu, machine)
    cpu.seconds += share
    machine.run(2.0 * used, 2.0)
    load.observe(101.0, cpu, machine)


def test_a_saturated_machine_makes_a_broker_using_half_its_threshold_busy() -> None:
    load, cpu, machine = CpuLoad(), FakeCpu(), FakeMachine()
    windows(load, cpu, machine, share=0.76, used=0.8)  # 64 subscribers on 2 cores
    assert math.isclose(load.machine_share, 0.8)
    assert not load.busy(0.8)  # its own share alone is short of the threshold
    assert load.busy(0.8, 0.75)
    assert not load.busy(0.8, 0.85)  # the machine is not that busy


def test_a_broker_idle_on_a_busy_machine_is_not_busy() -> None:
    load, cpu, machine = CpuLoad(), FakeCpu(), FakeMachine()
    windows(load, cpu, machine, share=0.8 * SHARED_SHARE - 0.05, used=1.0)
    assert not load.busy(0.8, 0.75)
    load2, cpu2, machine2 = CpuLoad(), FakeCpu(), FakeMachine()
    windows(load2, cpu2, machine2, share=0.8 * SHARED_SHARE, used=1.0)
    assert load2.busy(0.8, 0.75)


def test_the_machine_rule_is_off_at_zero_and_with_the_broker_rule() -> None:
    load, cpu, machine = CpuLoad(), FakeCpu(), FakeMachine()
    windows(load, cpu, machine, share=0.7, used=1.0)
    assert not load.busy(0.8, 0.0)  # --busy-machine 0
    assert not load.busy(0.0, 0.75)  # --busy-cpu 0 turns every wait off


def test_unknown_machine_times_never_count_as_busy() -> None:
    load, cpu, machine = CpuLoad(), FakeCpu(), FakeMachine()
    machine.times = None
    windows(load, cpu, machine, share=0.7, used=1.0)
    assert load.machine_share == 0.0
    assert not load.busy(0.8, 0.75)
    assert load.busy(0.6, 0.75)  # its own share still counts


def test_machine_times_that_do_not_move_read_as_idle() -> None:
    load, cpu, machine = CpuLoad(), FakeCpu(), FakeMachine()
    windows(load, cpu, machine, share=0.7, used=0.0)
    machine.times = (5.0, 0.0)  # a counter that went back (a snapshot restored, say)
    load.observe(102.0, cpu, machine)
    assert load.machine_share == 0.0
