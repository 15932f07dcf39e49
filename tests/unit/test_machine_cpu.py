"""The machine's CPU times from a /proc/stat file (the real one and written ones)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from channel_server.machine_cpu import PROC_STAT, MachineCpu

STAT = "cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 50 2 25 400 20 1 1 0 3 0\nintr 12345\n"


def test_in_use_is_every_time_but_idle_and_iowait(tmp_path: Path) -> None:
    path = tmp_path / "stat"
    path.write_text(STAT)
    assert MachineCpu(path)() == (100 + 5 + 50 + 3 + 2 + 0, 1000)  # guest times not again


def test_the_real_file_gives_times_that_grow() -> None:
    """The service runs on Linux (DESIGN): its /proc/stat must parse."""
    read = MachineCpu(PROC_STAT)
    first = read()
    assert first is not None
    sum(range(3_000_000))  # some CPU time passes
    second = read()
    assert second is not None
    assert second[1] >= first[1] and second[0] >= first[0]
    assert 0 <= second[0] <= second[1]


@pytest.mark.parametrize("text", ["", "intr 1 2 3\n", "cpu  1 2 x 4 5\n", "cpu  1 2\n"])
def test_a_file_it_cannot_read_is_unknown_and_said_once(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "stat"
    path.write_text(text)
    read = MachineCpu(path)
    with caplog.at_level(logging.INFO, logger="channel_server.machine_cpu"):
        assert read() is None
        assert read() is None
    assert len(caplog.records) == 1
    assert "busy" in caplog.records[0].getMessage()


def test_a_missing_file_is_unknown(tmp_path: Path) -> None:
    assert MachineCpu(tmp_path / "absent")() is None


def test_a_pinned_broker_reads_its_own_cpu(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker on one CPU (serve --cpu) is saturated when that CPU is, whatever the
    machine's other CPUs do."""
    path = tmp_path / "stat"
    path.write_text(STAT)
    assert MachineCpu(path, cpu=0)() == (50 + 2 + 25 + 1 + 1 + 0, 499)  # guest times not again
    with caplog.at_level(logging.INFO, logger="channel_server.machine_cpu"):
        assert MachineCpu(path, cpu=3)() is None  # no such CPU: unknown, said once
    assert "no line for CPU 3" in caplog.text
