"""How a client command ends: one line on stderr and a documented exit code, whatever
happened (issue 14: signals, caps, the unexpected)."""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Callable, Iterator

import pytest

from channel_client import cli_common as cc
from channel_server.errors import LimitReached, QueueFull


@pytest.fixture(autouse=True)
def _restore_sigterm() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def run(command: Callable[[argparse.Namespace], int], traceback: bool = False) -> int:
    return cc.run_client_command(command, argparse.Namespace(traceback=traceback))


def raising(exc: BaseException) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        raise exc

    return command


def test_sigterm_interrupts_a_command_like_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    def terminated(args: argparse.Namespace) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        return cc.EXIT_OK  # not reached: the handler raises on delivery

    assert run(terminated) == cc.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "error: interrupted\n"


@pytest.mark.parametrize(
    "refusal", [LimitReached("channels", 3, "broker b"), QueueFull("c", 10, 0, ["e1"])]
)
def test_a_cap_reached_exits_as_refused(refusal: Exception) -> None:
    assert run(raising(refusal)) == cc.EXIT_REFUSED


def test_an_unexpected_error_is_one_line_unless_traceback_is_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(raising(RuntimeError("disk on fire"))) == cc.EXIT_ERROR
    err = capsys.readouterr().err
    assert err == "error: unexpected RuntimeError: disk on fire (--traceback shows where)\n"
    with pytest.raises(RuntimeError, match="disk on fire"):
        run(raising(RuntimeError("disk on fire")), traceback=True)
