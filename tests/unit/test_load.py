"""How busy the broker is on its CPU: windows of wall time, fake CPU seconds."""

from __future__ import annotations

import math

from channel_server.core.load import WINDOW_S, CpuLoad


class FakeCpu:
    """CPU seconds the test sets; counts how often they are read."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.seconds


def test_nothing_is_known_before_a_window_closes() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu)
    cpu.seconds = 0.9
    load.observe(100.0 + WINDOW_S / 2, cpu)
    assert load.share == 0.0
    assert not load.busy(0.5)


def test_the_cpu_is_read_once_per_window_not_per_observation() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    for i in range(1000):
        load.observe(100.0 + i * 0.001, cpu)  # one second of publishes a millisecond apart
    assert cpu.reads == 1
    load.observe(100.0 + WINDOW_S, cpu)
    assert cpu.reads == 2


def test_a_window_of_one_core_is_busy() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu)
    cpu.seconds = 0.8
    load.observe(101.0, cpu)
    assert math.isclose(load.share, 0.8)
    assert load.busy(0.75)
    assert not load.busy(0.9)


def test_a_long_idle_spell_shows_as_one_long_quiet_window() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu)
    cpu.seconds = 1.0
    load.observe(101.0, cpu)
    assert load.busy(0.75)
    cpu.seconds = 1.1
    load.observe(161.0, cpu)  # a minute without publishes
    assert math.isclose(load.share, 0.1 / 60.0)
    assert not load.busy(0.75)


def test_a_threshold_of_zero_is_never_busy() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu)
    cpu.seconds = 2.0
    load.observe(101.0, cpu)
    assert load.busy(1.5)
    assert not load.busy(0.0)


def test_a_wall_clock_stepping_back_starts_the_window_again() -> None:
    load, cpu = CpuLoad(), FakeCpu()
    load.observe(100.0, cpu)
    cpu.seconds = 5.0
    load.observe(50.0, cpu)  # stepped back: no share from a negative span
    assert load.share == 0.0
    cpu.seconds = 5.5
    load.observe(51.0, cpu)
    assert math.isclose(load.share, 0.5)
