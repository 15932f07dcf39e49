"""The hostile suite's processes and budget, and its summary table.

``PUBSUB_HOSTILE_CALLS`` sets how many fuzzed calls the run makes (default: the short CI
run); ``scripts/hostile.sh`` sets it for the long run. The table of figures is printed at
the end of every run that attacked something.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile import report
from tests.hostile.services import Service, running_service

CALLS_ENV = "PUBSUB_HOSTILE_CALLS"
SHORT_CALLS = 400
"""Fuzzed calls in the default (CI) run, all targets together: a few seconds of calls."""


def hostile_calls() -> int:
    """How many fuzzed calls to make, from $PUBSUB_HOSTILE_CALLS (default SHORT_CALLS)."""
    text = os.environ.get(CALLS_ENV, "")
    try:
        return int(text) if text else SHORT_CALLS
    except ValueError:
        raise pytest.UsageError(f"${CALLS_ENV} must be a number of calls, not {text!r}") from None


@pytest.fixture(scope="session")
def calls_budget() -> int:
    return hostile_calls()


@pytest.fixture(scope="session")
def hostile_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for every process of the suite: they share the owner's token."""
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="session")
def service(hostile_root: Path) -> Iterator[Service]:
    with running_service(hostile_root) as s:
        yield s


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not report.ROWS:
        return
    terminalreporter.write_sep("=", f"hostile input: {hostile_calls()} fuzzed calls asked for")
    for line in report.table(report.ROWS):
        terminalreporter.write_line(line)
