"""``status --watch``: the status tables refreshed in place in the terminal (rich.live),
until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import Pyro5.errors
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from channel_client import cli_common as cc
from channel_server.errors import ChannelError

REFRESH_ERRORS = (ChannelError, Pyro5.errors.PyroError, OSError)
"""A refresh that fails with one of these keeps the last tables and says why; the next
refresh tries again (a broker restarting must not end the watch)."""


def watch(
    console: Console,
    render: Callable[[], list[RenderableType]],
    args: argparse.Namespace,
) -> int:
    """Show ``render()`` every ``args.interval`` seconds until a stop signal; exit 0."""
    stop = cc.stop_on_signals()  # handlers that only set the flag: Ctrl-C ends the loop
    shown: list[RenderableType] = []
    with Live(console=console, auto_refresh=False, transient=False) as live:
        while True:
            try:
                shown = render()
                note = f"updated {time.strftime('%H:%M:%S')}"
            except REFRESH_ERRORS as exc:
                note = f"not updated at {time.strftime('%H:%M:%S')}: {exc}"
            footer = Text(f"{note}; every {args.interval:g} s, Ctrl-C stops", style="dim")
            live.update(Group(*shown, footer), refresh=True)
            if stop.wait(args.interval):
                return cc.EXIT_OK
