"""scripts/bench_peer.py's ``--only`` names (the benchmark itself runs by hand)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def peer(import_script: Callable[[str], ModuleType]) -> ModuleType:
    return import_script("bench_peer")


def test_only_takes_workloads_with_their_store(peer: ModuleType) -> None:
    assert peer.workloads("batch1/sqlite, batched/memory") == ["batch1/sqlite", "batched/memory"]


@pytest.mark.parametrize("bad", ["batch1", "batched/redis", ",", ""])
def test_a_name_without_its_store_is_refused_with_the_choices(peer: ModuleType, bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="choose from batched/sqlite"):
        peer.workloads(bad)
