"""scripts/bench_wake.py: the hand-offs it times complete, and it prints both rows (the
figures themselves are read by hand)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def wake(import_script: Callable[[str], ModuleType]) -> ModuleType:
    return import_script("bench_wake")


def test_a_round_of_hand_offs_takes_some_time_and_leaves_no_thread(wake: ModuleType) -> None:
    wall, cpu = wake.hand_offs(50)
    assert wall > 0 and cpu >= 0
    assert not [t for t in threading.enumerate() if t.name == "bench-wake-answer"]


def test_pinning_for_the_one_cpu_row_is_undone(wake: ModuleType) -> None:
    allowed = os.sched_getaffinity(0)
    assert wake.pinned_hand_offs(50) is not None
    assert os.sched_getaffinity(0) == allowed


def test_it_prints_both_rows_and_the_halt_polling(
    wake: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert wake.main(["--rounds", "50", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "guest halt polling: " in out
    assert "| any CPU |" in out and "| one CPU |" in out
