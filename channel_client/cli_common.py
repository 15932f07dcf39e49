"""Pieces every command line shares: name-server flags, logging, stop signals, exit codes.

Light on purpose (no broker imports), so the publisher and subscriber CLIs can use it.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import Pyro5.errors

from channel_server import credentials, tls
from channel_server.errors import (
    CapacityError,
    ChannelError,
    ClientError,
    InvalidArgument,
    NotAuthorized,
    TransportError,
)
from channel_server.events import IdScope
from channel_server.transport import TransportConfig
from channel_server.wire import DEFAULT_HOST, DEFAULT_NS_PORT, as_refusal, check_name

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


class Parser(argparse.ArgumentParser):
    """argparse with a one-line reason on bad input (exit 2), not the whole usage text."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def add_ns_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ns-host", default=DEFAULT_HOST, help="name server host (default %(default)s)"
    )
    parser.add_argument(
        "--ns-port",
        type=port_number,
        default=DEFAULT_NS_PORT,
        help="name server port (default %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log verbosity on stderr (default %(default)s)",
    )
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="on an unexpected error, show the Python traceback instead of one line",
    )
    parser.add_argument(
        "--credentials",
        type=Path,
        default=None,
        metavar="FILE",
        help="connect as the user in FILE ({user: NAME, password: SECRET}; also "
        "$PUBSUB_CREDENTIALS, or $PUBSUB_USER and $PUBSUB_PASSWORD); default: the local "
        "token of this OS user",
    )
    parser.add_argument(
        "--tls-cert",
        type=Path,
        default=None,
        metavar="FILE",
        help="TLS: this process's PEM certificate (chain), its server and client certificate; "
        "needed by every process that serves (broker, name server, push subscriber). "
        "TLS is all or nothing: every process of a deployment must use it "
        f"(default ${tls.CERT_ENV})",
    )
    parser.add_argument(
        "--tls-key",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"TLS: the unencrypted PEM private key of --tls-cert (default ${tls.KEY_ENV})",
    )
    parser.add_argument(
        "--tls-ca",
        type=Path,
        default=None,
        metavar="FILE",
        help="TLS: PEM CA certificate(s) to verify peers with (default: the system's); on a "
        "process that serves it also turns on mutual TLS (clients need a certificate that "
        f"CA signed) (default ${tls.CA_ENV})",
    )


def add_bind_flags(parser: argparse.ArgumentParser, *bind_dests: str) -> None:
    """``--insecure`` for a command that binds to the addresses in ``bind_dests`` (its
    argument names): :func:`setup` refuses a non-loopback one without TLS unless given."""
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback bind address without TLS (credentials and events then "
        "cross the network in clear text)",
    )
    parser.set_defaults(bind_dests=bind_dests)
    add_transport_flags(parser)


def add_transport_flags(parser: argparse.ArgumentParser) -> None:
    """Bounds on the connections a serving process accepts (see transport.TransportConfig)."""
    d = TransportConfig()
    group = parser.add_argument_group("connection limits")
    group.add_argument(
        "--max-connections",
        type=positive_int,
        default=d.max_connections,
        help="connections served at once, a thread each; one more is refused as busy "
        f"(default {d.max_connections})",
    )
    group.add_argument(
        "--comm-timeout",
        type=non_negative_float,
        default=d.comm_timeout_s,
        metavar="S",
        help="close a connection idle this long; clients reconnect (0: never; default "
        f"{d.comm_timeout_s:g})",
    )
    group.add_argument(
        "--handshake-timeout",
        type=positive_float,
        default=d.handshake_timeout_s,
        metavar="S",
        help="a new connection must have authenticated within this "
        f"(default {d.handshake_timeout_s:g})",
    )
    group.add_argument(
        "--max-message-bytes",
        type=positive_int,
        default=d.max_message_bytes,
        metavar="N",
        help=f"largest message accepted (default {d.max_message_bytes})",
    )
    group.add_argument(
        "--max-waiting",
        type=positive_int,
        default=d.max_waiting,
        metavar="N",
        help="connections waiting to authenticate (no thread each); the oldest is closed "
        f"past this (default {d.max_waiting})",
    )


def transport_from_args(args: argparse.Namespace) -> TransportConfig:
    return TransportConfig(
        max_connections=args.max_connections,
        comm_timeout_s=args.comm_timeout,
        handshake_timeout_s=args.handshake_timeout,
        max_message_bytes=args.max_message_bytes,
        max_waiting=args.max_waiting,
    )


def add_ids_flag(parser: argparse.ArgumentParser, default: str | None, text: str) -> None:
    """``--ids publisher|channel`` (``args.id_scope``): where a channel's event ids must
    be unique; ``text`` says which channels it is for."""
    parser.add_argument(
        "--ids",
        dest="id_scope",
        choices=[scope.value for scope in IdScope],
        default=default,
        help=f"event ids unique per publisher (one cannot block another's ids) or per "
        f"channel (the old rule), {text}",
    )


def add_client_flags(parser: argparse.ArgumentParser) -> None:
    """Flags of the classic clients (put / get / scripts): retries, state, fault."""
    parser.add_argument(
        "--attempts",
        type=positive_int,
        default=5,
        help="tries per request before giving up on the broker (default %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=10.0,
        help="seconds one try may take (default %(default)s)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="client state (sequences, last ids, script progress); default "
        "$PUBSUB_STATE_DIR or ~/.local/state/pubsub-channels",
    )
    parser.add_argument(
        "--drop-replies",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="fault injection: drop the first N replies as if lost on the way (the client "
        "then retries)",
    )


def add_client_command(
    sub: Any, name: str, help_text: str, description: str, id_dest: str
) -> argparse.ArgumentParser:
    """A classic-client subcommand with ``--id`` and the name-server and client flags."""
    cmd = sub.add_parser(name, help=help_text, description=description)
    cmd.add_argument("--id", required=True, type=plain_name, dest=id_dest, help="client id")
    add_ns_flags(cmd)
    add_client_flags(cmd)
    return cmd


def add_script_command(sub: Any, actions: str, id_dest: str) -> None:
    """The ``script FILE.yaml`` subcommand of the publisher and the subscriber."""
    cmd = add_client_command(
        sub,
        "script",
        f"run a YAML scenario of {actions} steps, resuming where it stopped",
        f"Run the steps of a YAML file in order: each step has a topic and an action "
        f"({actions}), and optionally repeat, sleep_between and sleep_after (seconds). A "
        "client restarted with the same file resumes after its last completed step.",
        id_dest,
    )
    cmd.add_argument("file", type=Path, help="the scenario (YAML)")
    cmd.add_argument(
        "--restart",
        action="store_true",
        help="run every step again, ignoring the progress an earlier run of this file saved",
    )


def positive_int(text: str) -> int:
    return _bounded(int, text, 1)


def non_negative_int(text: str) -> int:
    return _bounded(int, text, 0)


def non_negative_float(text: str) -> float:
    return _bounded(float, text, 0.0)


def positive_float(text: str) -> float:
    value = _bounded(float, text, 0.0)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


def port_number(text: str) -> int:
    value = _bounded(int, text, 0)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {text!r}")
    return value


HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?")
"""A DNS host name (labels of letters, digits and hyphens)."""


def host_name(text: str) -> str:
    """argparse type of a host clients connect to: a DNS name or an IP address that is not
    the unspecified one (0.0.0.0, ::); an IPv6 address comes back in brackets, as a URI
    names it."""
    host = text.strip().strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if len(host) > 253 or not HOST_NAME.fullmatch(host):
            raise argparse.ArgumentTypeError(f"not a host name or IP address: {text!r}") from None
        return host
    if address.is_unspecified:
        raise argparse.ArgumentTypeError(f"{text} is no address a client can connect to")
    return f"[{address}]" if address.version == 6 else str(address)


def is_unspecified(host: str) -> bool:
    """Whether a bind address means every interface (0.0.0.0, ::, or empty)."""
    try:
        return not host or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def plain_name(text: str) -> str:
    """argparse type of a channel, group, topic, subscriber or publisher name: checked when
    the command line is parsed, before any state file is opened (names make file names)."""
    try:
        return check_name("name", text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc.reason}") from None


def _bounded(kind: Callable[[str], Any], text: str, low: Any) -> Any:
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if value != value or value < low:  # NaN or too small
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {text!r}")
    return value


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


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address (any other name counts as not loopback)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("Pyro5").setLevel(logging.CRITICAL)  # we report its errors ourselves


def stop_on_signals() -> threading.Event:
    """An Event set by SIGTERM or SIGINT; the handler only sets the flag."""
    stop = threading.Event()

    def _handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    return stop


def exit_on_next_signal(why: str) -> None:
    """From now on SIGTERM or SIGINT ends the process at once (exit 130), saying ``why``
    that is safe: for a graceful stop that may wait (a subscriber saying goodbye to a
    broker that is away), the second Ctrl-C is the way out."""

    def _now(signum: int, frame: Any) -> None:
        print(f"stopping now: {why}", file=sys.stderr, flush=True)
        os._exit(EXIT_INTERRUPTED)

    signal.signal(signal.SIGTERM, _now)
    signal.signal(signal.SIGINT, _now)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


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
    try:
        return command(args)
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    except NotAuthorized as exc:
        return fail(str(exc), EXIT_NOT_AUTHORIZED)
    except (ClientError, *usage_errors) as exc:
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
