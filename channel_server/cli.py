"""``python -m channel_server``: run a broker, list channels.

The parser is assembled here; ``serve``'s flags are in serve_flags, the operator's commands
(``list``, ``status``, ``dead-letters``, ``forget``, ``delete``) in admin_cli."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from pathlib import Path
from typing import cast

import Pyro5.errors

from channel_client import cli_common as cc
from channel_server import config_file, cpu_pin, credentials
from channel_server.admin_cli import (
    add_delete_command,
    add_forget_command,
    add_inspect_commands,
    dead_letters,
    delete_channel,
    forget_member,
    list_channels,
    show_status,
)
from channel_server.daemon_loop import DaemonLoop
from channel_server.errors import ChannelError, InvalidArgument, NotAuthorized, StoreError
from channel_server.move_cli import add_move_commands, move_channel, rebalance
from channel_server.serve_flags import DEFAULT_DATA_DIR, add_serve_command, config_from_args
from channel_server.store.dsn import store_dsn, without_password
from channel_server.transport import bind_failure
from channel_server.users_cli import add_users_command, run_users

__all__ = ["build_parser", "config_from_args", "main", "serve", "serve_settings"]

log = logging.getLogger("channel_server")
STOP_POLL_S = 1.0
GC_THRESHOLDS = (50_000, 20, 100)
"""The cyclic garbage collector's thresholds in a broker process (CPython's: 700, 10, 10).
A collection is due when objects created minus objects freed pass the first, so a
publish's short-lived dicts never cause one, but what a broker keeps does: each new
partition leaves a queue and its lists behind. At a new partition per event (a key per
order) the defaults ran a young collection every few publishes and a full one over the
whole heap (85 ms at 630,000 objects) every few seconds: in a run of 700,000 events at
100,000 partitions the collector took 1.44 s of the broker's 31 s of CPU, and 0.15 s with
these. The price: up to 50,000 objects of garbage in cycles wait for a scan."""


def build_parser() -> argparse.ArgumentParser:
    parser = cc.Parser(
        prog="python -m channel_server",
        description="Event channel broker: competing consumers over Pyro5.",
    )
    cc.add_version_flag(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_command(sub)
    add_inspect_commands(sub)
    nameserver = sub.add_parser(
        "nameserver",
        help="run a name server that authenticates (for several brokers)",
        description="Run a name server that admits only callers with a credential (the "
        "local token of this OS user, or a user of --users): anyone authenticated may look "
        "names up, only brokers may register or remove them. Brokers embed one when none "
        "answers; run this one to share it between brokers.",
    )
    cc.add_ns_flags(nameserver)
    cc.add_bind_flags(nameserver, "ns_host")
    nameserver.add_argument("--users", type=Path, default=None, metavar="FILE", help="users file")
    add_users_command(sub)
    add_forget_command(sub)
    add_delete_command(sub)
    add_move_commands(sub)
    return parser


def serve(args: argparse.Namespace) -> int:
    from channel_server.access import Access
    from channel_server.broker import Broker  # the heavy part, only for this command
    from channel_server.store import MemoryStore, Store
    from channel_server.store.postgres import PostgresConfig, PostgresStore
    from channel_server.store.sqlite import SQLiteStore
    from channel_server.users import UsersFile

    config = config_from_args(args)
    if args.print_config:
        print(serve_settings(without_password(args)), end="")
        return cc.EXIT_OK
    try:
        pinned = cpu_pin.pin(config.cpu)  # first: every thread started later inherits it
    except InvalidArgument as exc:
        return cc.fail(str(exc), cc.EXIT_USAGE)
    gc.set_threshold(*GC_THRESHOLDS)  # this process is the broker's (see GC_THRESHOLDS)
    stop = cc.stop_on_signals()
    data_dir = None
    dsn = store_dsn(args)
    if args.memory:
        store: Store = MemoryStore()
        kept = "store memory (nothing kept)"
    else:
        data_dir = None if dsn else args.data_dir or Path(DEFAULT_DATA_DIR) / config.broker_id
        kept = "store PostgreSQL" if data_dir is None else _data_dir_line(data_dir)
        try:
            store = (
                PostgresStore(dsn, config.broker_id, PostgresConfig(lease_s=config.lease_s))
                if dsn
                else SQLiteStore(cast(Path, data_dir), args.sync)
            )
        except StoreError as exc:  # damaged, in use by another broker, refused, no psycopg
            return cc.fail(str(exc), cc.EXIT_UNAVAILABLE)
    token = credentials.ensure_token(credentials.state_root(), data_dir)
    users = UsersFile.load(args.users) if args.users else None
    broker = Broker(config, store, token, Access(token, users, args.users))
    try:
        broker.start()
    except (OSError, Pyro5.errors.PyroError, ChannelError) as exc:
        broker.stop()
        code = cc.EXIT_NOT_AUTHORIZED if isinstance(exc, NotAuthorized) else cc.EXIT_UNAVAILABLE
        return cc.fail(f"cannot start the broker: {exc}", code)
    if pinned:
        log.info("%s", pinned)  # once started: a start-up error stays one line
    ns = broker.ns
    assert ns is not None  # start() connected it or raised
    ns_kind = "embedded" if ns.embedded else "existing"
    print(
        f"broker {config.broker_id} ready at {broker.uri}; name server "
        f"{config.ns_host}:{ns.port} ({ns_kind}); channels: "
        f"{', '.join(broker.channel_names()) or '-'}; {kept}"
        + (f"; http {broker.monitor.url}" if broker.monitor else ""),
        flush=True,
    )
    try:
        failed = cc.serve_until_stopped(stop, broker.failed)
    finally:
        cc.exit_on_next_signal("acks not written yet come back as redeliveries")
        log.info("stopping broker %s (a second signal quits at once)", config.broker_id)
        broker.stop()
    return cc.EXIT_OK if failed is None else cc.fail(failed, cc.EXIT_ERROR)


SETTINGS_TITLE = """\
Settings of a broker: python -m channel_server serve --config FILE.toml
Each key is a long flag of `serve --help` (spelled with - or _), its value what the flag
takes; a flag given on the command line overrides the file (--channel adds to it). Relative
paths are relative to the working directory. A key commented out has no default.
Written by `serve --print-config`, which prints the settings in effect."""


def serve_settings(args: argparse.Namespace | None) -> str:
    """``serve``'s settings as TOML: those in effect, or with None the defaults (what
    docs/broker.example.toml holds)."""
    serve = config_file.subcommand(build_parser(), "serve")
    return config_file.to_toml(serve, args, SETTINGS_TITLE)


def run_nameserver(args: argparse.Namespace) -> int:
    from channel_server.access import Access
    from channel_server.nameservice import GuardedNameServerDaemon
    from channel_server.users import UsersFile

    token = credentials.ensure_token(credentials.state_root())
    users = UsersFile.load(args.users) if args.users else None
    stop = cc.stop_on_signals()
    try:
        access = Access(token, users, args.users)
        daemon = GuardedNameServerDaemon(args.ns_host, args.ns_port, access)
    except OSError as exc:
        exc = bind_failure(exc, "name server", args.ns_host, args.ns_port)
        return cc.fail(f"cannot start the name server: {exc}", cc.EXIT_UNAVAILABLE)
    serving = DaemonLoop(daemon, "nameserver")
    serving.start()
    print(f"name server ready at {args.ns_host}:{daemon.sock.getsockname()[1]}", flush=True)
    try:
        failed = cc.serve_until_stopped(stop, serving.failed)
    finally:
        cc.exit_on_next_signal("the brokers put their names back in a new name server")
        serving.stop(STOP_POLL_S * 5)
    return cc.EXIT_OK if failed is None else cc.fail(failed, cc.EXIT_ERROR)


COMMANDS = {
    "serve": serve,
    "list": list_channels,
    "status": show_status,
    "dead-letters": dead_letters,
    "forget": forget_member,
    "delete": delete_channel,
    "move": move_channel,
    "rebalance": rebalance,
    "nameserver": run_nameserver,
    "users": run_users,
}


def _data_dir_line(data_dir: Path) -> str:
    """Where the broker keeps its channels, whole (the default is relative to the
    current directory: a broker started again from another one found none, and said
    nothing of where it looked: session 36's newcomer)."""
    new = "" if data_dir.exists() else " (new)"
    return f"data dir {data_dir.resolve()}{new}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "config", None) is not None:
        try:
            args = config_file.reparse(parser, argv, args, args.config)
        except InvalidArgument as exc:
            return cc.fail(str(exc), cc.EXIT_USAGE)
    cc.setup(args)
    return cc.run_client_command(COMMANDS[args.command], args)


if __name__ == "__main__":
    sys.exit(main())
