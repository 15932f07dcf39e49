"""Exit codes and the runner of a client command: our typed errors become one line and a code.

Split from :mod:`channel_client.cli_common` (which re-exports it for the commands).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import Any

import Pyro5.errors

from channel_server.errors import (
    CapacityError,
    ChannelError,
    ClientError,
    NotAuthorized,
    TransportError,
    UnknownChannel,
)
from channel_server.wire import as_refusal

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_REFUSED = 4
EXIT_NOT_SUBSCRIBED = 5
EXIT_NOT_AUTHORIZED = 6
EXIT_PARTIAL = 7
"""Done in part: some of the input was invalid or unknown and was skipped (the output
names it: lines of invalid rows, unknown dead-letter ids); the rest was done."""
EXIT_INTERRUPTED = 130
"""Stopped by Ctrl-C or SIGTERM (what was done is printed first)."""


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


UNKNOWN_CHANNEL_HINT = (
    "(`python -m channel_server list` shows the channels there are; a broker creates one "
    "with `serve --channel NAME`, a publisher with `publish --create`)"
)
"""What a command adds when the channel it names does not exist: the first error a
newcomer meets after starting a bare broker."""


def run_client_command(
    command: Callable[[argparse.Namespace], int],
    args: argparse.Namespace,
    usage_errors: tuple[type[Exception], ...] = (),
) -> int:
    """Run a client subcommand; our typed errors become a one-line reason and an exit code
    (``usage_errors``: more exception types that mean bad input). SIGTERM interrupts like
    Ctrl-C (a command that stops more gently installs its own handlers); anything
    unexpected is one line too, unless ``--traceback``."""
    signal.signal(signal.SIGTERM, _interrupt)
    bad_input: tuple[type[Exception], ...] = (ClientError, *usage_errors)
    try:
        return command(args)
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    except NotAuthorized as exc:
        return fail(str(exc), EXIT_NOT_AUTHORIZED)
    except UnknownChannel as exc:
        return fail(f"{exc} {UNKNOWN_CHANNEL_HINT}", EXIT_USAGE)
    except bad_input as exc:
        return fail(str(exc), EXIT_USAGE)
    except (TransportError, Pyro5.errors.CommunicationError) as exc:
        if refusal := as_refusal(exc):
            return fail(str(refusal), EXIT_NOT_AUTHORIZED)
        typed = isinstance(exc, TransportError)  # it names what was unavailable
        return fail(str(exc) if typed else f"broker unavailable: {exc}", EXIT_UNAVAILABLE)
    except CapacityError as exc:
        return fail(str(exc), EXIT_REFUSED)
    except ChannelError as exc:
        return fail(str(exc))
    except Exception as exc:
        if getattr(args, "traceback", False):
            raise
        return fail(f"unexpected {type(exc).__name__}: {exc} (--traceback shows where)")


def fail(message: str, code: int = EXIT_ERROR) -> int:
    """Print a one-line reason on stderr and return the exit code."""
    print(f"error: {message}", file=sys.stderr)
    return code
