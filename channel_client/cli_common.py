"""Pieces every command line shares: name-server flags, the flag groups of clients and
servers, and (re-exported, so a command needs one import) the argparse types of
:mod:`channel_client.arg_types`, the setup and signals of :mod:`channel_client.runtime`
and the exit codes and runner of :mod:`channel_client.exits`.

Light on purpose (no broker imports), so the publisher and subscriber CLIs can use it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from channel_client.arg_types import (
    HOST_NAME,
    host_name,
    is_loopback,
    is_unspecified,
    non_negative_float,
    non_negative_int,
    plain_name,
    port_number,
    positive_float,
    positive_int,
)
from channel_client.exits import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_AUTHORIZED,
    EXIT_NOT_SUBSCRIBED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    fail,
    run_client_command,
)
from channel_client.runtime import (
    exit_on_next_signal,
    serve_until_stopped,
    setup,
    setup_logging,
    setup_tls,
    signals_to_main_thread,
    stop_on_signals,
    transport_from_args,
)
from channel_server import tls
from channel_server.events import IdScope
from channel_server.transport import TransportConfig
from channel_server.version import installed_version
from channel_server.wire import DEFAULT_HOST, DEFAULT_NS_PORT

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_AUTHORIZED",
    "EXIT_NOT_SUBSCRIBED",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "HOST_NAME",
    "Parser",
    "add_bind_flags",
    "add_channel_command",
    "add_channel_flags",
    "add_client_command",
    "add_client_flags",
    "add_group_flag",
    "add_id_flag",
    "add_ids_flag",
    "add_ns_flags",
    "add_script_command",
    "add_state_dir_flag",
    "add_transport_flags",
    "add_version_flag",
    "exit_on_next_signal",
    "fail",
    "host_name",
    "is_loopback",
    "is_unspecified",
    "non_negative_float",
    "non_negative_int",
    "plain_name",
    "port_number",
    "positive_float",
    "positive_int",
    "run_client_command",
    "serve_until_stopped",
    "setup",
    "setup_logging",
    "setup_tls",
    "signals_to_main_thread",
    "stop_on_signals",
    "transport_from_args",
]


class Parser(argparse.ArgumentParser):
    """argparse with a one-line reason on bad input (exit 2), not the whole usage text."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """``--version`` on a command's top-level parser (an upgrade starts by asking it)."""
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s (pubsub-channels {installed_version()})",
    )


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


def add_channel_flags(parser: argparse.ArgumentParser, id_dest: str, id_help: str) -> None:
    """Who connects to which channel: the name-server flags, ``--channel`` and ``--id``
    (``args.<id_dest>``), as ``publisher publish`` and ``subscriber run`` take them."""
    add_ns_flags(parser)
    parser.add_argument("--channel", required=True, type=plain_name, help="channel name")
    add_id_flag(parser, id_dest, id_help)


def add_id_flag(parser: argparse.ArgumentParser, dest: str, text: str) -> None:
    """``--id`` (required, a plain name) into ``args.<dest>``."""
    parser.add_argument("--id", required=True, type=plain_name, dest=dest, help=text)


GROUP_HELP = "consumer group (default: 'default' on a queue, the member's own on a topic)"


def add_group_flag(parser: argparse.ArgumentParser, text: str = GROUP_HELP) -> None:
    """``--group`` (a plain name; None when not given: the channel's kind decides)."""
    parser.add_argument("--group", type=plain_name, default=None, help=text)


def add_state_dir_flag(parser: argparse.ArgumentParser, text: str) -> None:
    """``--state-dir DIR`` (None when not given); ``text`` says what the command keeps
    there and its default."""
    parser.add_argument("--state-dir", type=Path, default=None, metavar="DIR", help=text)


def add_bind_flags(parser: argparse.ArgumentParser, *bind_dests: str, users: bool = True) -> None:
    """``--insecure`` for a command that binds to the addresses in ``bind_dests`` (its
    argument names): :func:`setup` refuses a non-loopback one without TLS unless given.
    ``users``: its daemon admits users of a users file (not a subscriber's callback)."""
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback bind address without TLS (credentials and events then "
        "cross the network in clear text)",
    )
    parser.set_defaults(bind_dests=bind_dests)
    add_transport_flags(parser, users)


def add_transport_flags(parser: argparse.ArgumentParser, users: bool = True) -> None:
    """Bounds on the connections a serving process accepts (see transport.TransportConfig);
    ``users``: with the share of one user."""
    d = TransportConfig()
    group = parser.add_argument_group("connection limits")
    group.add_argument(
        "--max-connections",
        type=positive_int,
        default=d.max_connections,
        help="connections served at once, a thread each; one more is refused as busy "
        f"(default {d.max_connections})",
    )
    if users:
        group.add_argument(
            "--max-connections-per-user",
            type=positive_int,
            default=None,
            metavar="N",
            help="connections one user of --users may hold at once (the owner: any); one "
            "more is refused (default: half of --max-connections)",
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
    add_count_flag(group, "--max-message-bytes", d.max_message_bytes, "largest message accepted")
    add_count_flag(
        group,
        "--max-waiting",
        d.max_waiting,
        "connections waiting to authenticate (no thread each); the oldest is closed past this",
    )


def add_count_flag(group: Any, flag: str, default: int, text: str) -> None:
    """A flag taking a count of at least 1 (``N``); ``text`` is its help, without the
    default, which is added."""
    group.add_argument(
        flag,
        type=positive_int,
        default=default,
        metavar="N",
        help=f"{text} (default %(default)s)",
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
    add_state_dir_flag(
        parser,
        "client state (sequences, last ids, script progress); default "
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
    add_id_flag(cmd, id_dest, "client id")
    add_ns_flags(cmd)
    add_client_flags(cmd)
    return cmd


def add_channel_command(
    sub: Any, name: str, help_text: str, description: str
) -> argparse.ArgumentParser:
    """An operator's subcommand about one channel: the name-server flags and CHANNEL."""
    cmd = sub.add_parser(name, help=help_text, description=description)
    add_ns_flags(cmd)
    cmd.add_argument("channel", type=plain_name, help="channel name")
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
