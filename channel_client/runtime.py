"""Process setup every command shares: logging, credentials, TLS, connection limits, and
stop signals."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from channel_client.arg_types import is_loopback
from channel_client.exits import EXIT_INTERRUPTED, EXIT_USAGE, fail
from channel_server import credentials, tls
from channel_server.errors import InvalidArgument
from channel_server.transport import TransportConfig

STOP_POLL_S = 1.0
"""How often a serving loop looks at its stop flag (short waits keep signals prompt)."""


def transport_from_args(args: argparse.Namespace) -> TransportConfig:
    return TransportConfig(
        max_connections=args.max_connections,
        comm_timeout_s=args.comm_timeout,
        handshake_timeout_s=args.handshake_timeout,
        max_message_bytes=args.max_message_bytes,
        max_waiting=args.max_waiting,
        max_connections_per_user=getattr(args, "max_connections_per_user", None),
    )


def setup(args: argparse.Namespace) -> None:
    """Logging, the credential named on the command line (for every proxy) and TLS (for
    every daemon and proxy). A credentials file or TLS setting that cannot work, or a
    non-loopback bind without TLS or ``--insecure``, ends the process: one line on stderr,
    exit 2."""
    setup_logging(args.log_level)
    if getattr(args, "credentials", None) is not None:
        os.environ[credentials.CREDENTIALS_ENV] = str(args.credentials)
    try:
        path = os.environ.get(credentials.CREDENTIALS_ENV)
        if path and hasattr(args, "credentials"):  # a command that connects
            credentials.from_file(Path(path))  # read now: not first in some thread's proxy
        setup_tls(args)
    except InvalidArgument as exc:
        raise SystemExit(fail(str(exc), EXIT_USAGE)) from None
    if hasattr(args, "max_connections"):
        transport_from_args(args).apply()


def setup_tls(args: argparse.Namespace) -> tls.TlsOptions:
    """Validate and apply the TLS flags (and env defaults); check the bind addresses of a
    command made with :func:`add_bind_flags`. Raises InvalidArgument."""
    bind_dests = getattr(args, "bind_dests", ())
    options = tls.from_args(args).validate(serving=bool(bind_dests))
    for dest in bind_dests:
        host = getattr(args, dest)
        if options.enabled or is_loopback(host):
            continue
        flag = "--" + dest.replace("_", "-")
        if not args.insecure:
            raise InvalidArgument(
                flag,
                f"{host} is not a loopback address and TLS is off: credentials would cross "
                "the network in clear text; give --tls-cert/--tls-key, or --insecure",
            )
        logging.getLogger(__name__).warning(
            "%s %s without TLS (--insecure): credentials and events cross the network in "
            "clear text",
            flag,
            host,
        )
    options.apply()
    return options


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("Pyro5").setLevel(logging.CRITICAL)  # we report its errors ourselves


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
"""What stops a process gracefully. SIGHUP too: a terminal that goes away (an ssh session
dropped), or an operator's "reload", killed a broker at once, without its clean stop (the
users file is read again by itself; nothing needs a reload)."""


def stop_on_signals() -> threading.Event:
    """An Event set by a stop signal (STOP_SIGNALS); the handler only sets the flag."""
    stop = threading.Event()

    def _handler(signum: int, frame: Any) -> None:
        stop.set()

    for signum in STOP_SIGNALS:
        signal.signal(signum, _handler)
    return stop


@contextlib.contextmanager
def signals_to_main_thread() -> Iterator[None]:
    """Threads started inside (and the threads they start) block SIGINT and SIGTERM, so
    the kernel delivers them to the main thread. Python runs handlers only there: a
    signal that landed on another thread would wait until the main thread's current wait
    ends (up to a join's timeout), and a second Ctrl-C would not quit at once."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def exit_on_next_signal(why: str) -> None:
    """From now on SIGTERM or SIGINT ends the process at once (exit 130), saying ``why``
    that is safe: for a graceful stop that may wait (a subscriber saying goodbye to a
    broker that is away), the second Ctrl-C is the way out."""

    def _now(signum: int, frame: Any) -> None:
        print(f"stopping now: {why}", file=sys.stderr, flush=True)
        os._exit(EXIT_INTERRUPTED)

    for signum in STOP_SIGNALS:
        signal.signal(signum, _now)


def join_in_slices(thread: threading.Thread, timeout_s: float) -> None:
    """``thread.join(timeout_s)`` for the main thread, in waits of at most STOP_POLL_S.
    A signal that lands just before a wait begins is handled only when that wait ends
    (CPython runs handlers between waits, and the wait does not see it), so one long
    join could keep a second Ctrl-C waiting for its whole timeout."""
    deadline = time.monotonic() + timeout_s
    while thread.is_alive() and (left := deadline - time.monotonic()) > 0:
        thread.join(min(left, STOP_POLL_S))


def serve_until_stopped(
    stop: threading.Event, failed: Callable[[], str | None] | None = None
) -> str | None:
    """Block until a stop signal sets ``stop`` (see :func:`stop_on_signals`): the wait of a
    process that serves from other threads (broker, name server, push subscriber). Returns
    early with what ``failed`` says (asked each poll) once a thread the process cannot
    serve without has died: the process should then stop and exit with an error, for its
    supervisor to restart it, rather than live on half served."""
    while not stop.wait(STOP_POLL_S):
        if failed is not None and (reason := failed()) is not None:
            return reason
    return None
