"""``status --watch``: refreshes until a stop signal, keeps the last tables when a refresh
fails, exits 0."""

from __future__ import annotations

import argparse
import io
import os
import signal
from collections.abc import Iterator

import pytest
from rich.console import Console
from rich.text import Text

from channel_client import cli_common as cc
from channel_server import cli
from channel_server.errors import BrokerUnavailable
from channel_server.monitor.watch import watch
from channel_server.status import status_renderables
from tests.unit.monitor_fakes import stats


@pytest.fixture
def own_signals() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_watch_refreshes_until_ctrl_c_and_keeps_the_last_tables(own_signals: None) -> None:
    console = Console(file=io.StringIO(), width=160)
    calls = []

    def render() -> list:
        calls.append(1)
        if len(calls) == 2:  # a refresh that fails: the tables of the first stay
            raise BrokerUnavailable("name server", "not reachable")
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the handler sets the stop flag
        return [Text(f"refresh {len(calls)}")]

    args = argparse.Namespace(interval=0.01)
    assert watch(console, render, args) == cc.EXIT_OK
    assert len(calls) == 3
    out = console.file.getvalue()
    assert "refresh 3" in out and "updated" in out and "Ctrl-C stops" in out


def test_status_shows_channels_and_unreachable_ones() -> None:
    console = Console(file=io.StringIO(), width=160)
    parts = status_renderables(
        [("orders", "b1", stats("orders")), ("gone", "b2", OSError("refused"))]
    )
    for part in parts:
        console.print(part)
    out = console.file.getvalue()
    assert "orders (queue, ids unique per publisher) on broker b1: 5/1000" in out
    assert "gone on broker b2: unreachable (refused)" in out
    assert [str(p) for p in status_renderables([])] == ["no channels"]


def test_watch_takes_no_json(capsys) -> None:
    assert cli.main(["status", "--watch", "--json", "--ns-port", "1"]) == cc.EXIT_USAGE
    assert "--watch: refreshes the tables; it does not take --json" in capsys.readouterr().err
