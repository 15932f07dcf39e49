"""``python -m channel_server``: run a broker, list channels."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import Pyro5.errors

from channel_server import cli_common as cc
from channel_server import config_file, credentials
from channel_server.config import BrokerConfig, ChannelConfig
from channel_server.errors import (
    ChannelError,
    InvalidArgument,
    MemberActive,
    NotAuthorized,
    NotSubscribed,
    StoreError,
    UnknownChannel,
)
from channel_server.events import IdScope, event_uid
from channel_server.lookup import resolve_channel
from channel_server.monitor.flags import add_http_flags, add_watch_flags, http_from_args
from channel_server.monitor.views import channel_row, channel_status
from channel_server.status import make_console, render_dead_letters, status_renderables
from channel_server.store.sqlite import DEFAULT_SYNC, SYNC_LEVELS
from channel_server.transport import bind_failure
from channel_server.users_cli import add_users_command, run_users
from channel_server.wire import (
    DEFAULT_HOST,
    NS_CHANNEL_PREFIX,
    broker_tag,
    check_name,
    locate_ns,
    make_proxy,
)

log = logging.getLogger("channel_server")
LIST_TIMEOUT_S = 3.0
DEFAULT_DATA_DIR = "pubsub-data"
STOP_POLL_S = 1.0


def build_parser() -> argparse.ArgumentParser:
    parser = cc.Parser(
        prog="python -m channel_server",
        description="Event channel broker: competing consumers over Pyro5.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    listing = sub.add_parser("list", help="one line per channel in the name server")
    cc.add_ns_flags(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON list instead")
    status = sub.add_parser(
        "status",
        help="counts, rates, members, partition owners, backlog and dead letters of channels",
        description="Show, per channel, its counts and rates (events/s accepted and "
        "acknowledged over the broker's --rate-window), its members (active or not, "
        "partitions owned, queued, in flight, small/long delays, failures), partition "
        "owners, backlog and dead letters.",
    )
    cc.add_ns_flags(status)
    status.add_argument("channel", nargs="?", help="one channel (default: all)")
    status.add_argument("--json", action="store_true", help="print the raw stats as JSON")
    add_watch_flags(status)
    dead = sub.add_parser(
        "dead-letters",
        help="list (or replay) a channel's dead-letter queue",
        description="List the events whose handler failed max-attempts times; --replay "
        "queues them (all, or the --id ones) for delivery again. An --id that names no dead "
        "letter is named on stderr and makes the exit code 7 (the others are still listed "
        "or replayed).",
    )
    cc.add_ns_flags(dead)
    dead.add_argument("channel", help="channel name")
    dead.add_argument("--replay", action="store_true", help="queue them for delivery again")
    dead.add_argument(
        "--id",
        action="append",
        dest="ids",
        metavar="EVENT_ID",
        help="only these (repeatable): an id names every publisher's event with it, "
        "PUBLISHER/ID one event",
    )
    dead.add_argument("--json", action="store_true", help="print JSON instead of a table")
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
    _add_forget(sub)
    return parser


def _add_forget(sub: Any) -> None:
    forget = sub.add_parser(
        "forget",
        help="remove a member of a channel now (admin)",
        description="Remove a member from its group now, with its subscription in the store. "
        "An inactive member (declared dead or timed out: 'NO' in status) holds nothing and "
        "goes at once; an active one is refused (exit 4) unless --force. The broker forgets "
        "inactive members by itself after --member-expiry. Forgetting the last member of a "
        "group other than default drops the group and its backlog, like an unsubscribe. "
        "Exit 5 when there is no such member.",
    )
    cc.add_ns_flags(forget)
    forget.add_argument("channel", type=cc.plain_name, help="channel name")
    forget.add_argument("member", type=cc.plain_name, help="the member's subscriber id")
    forget.add_argument(
        "--group",
        type=cc.plain_name,
        default=None,
        help="its group (default: default on a queue, the member's own on a topic)",
    )
    forget.add_argument(
        "--force",
        action="store_true",
        help="remove an active member too, as if it unsubscribed: its partitions and the "
        "events it holds go to the others (a subscriber still running subscribes again, as "
        "a new member)",
    )


CHANNEL_FLAGS = (
    ("--capacity", cc.positive_int, "capacity", "most unacknowledged events per channel"),
    (
        "--ack-timeout",
        cc.positive_float,
        "ack_timeout_s",
        "seconds a push (handing a batch over) may take before it counts as failed; also "
        "how long a subscriber holding events may stay silent before it is pinged",
    ),
    (
        "--handler-timeout",
        cc.positive_float,
        "handler_timeout_s",
        "seconds a subscriber may hold one event while it answers pings (a hung handler)",
    ),
    (
        "--heartbeat",
        cc.positive_float,
        "heartbeat_s",
        "seconds between a push subscriber's heartbeats (it learns whether it was dropped)",
    ),
    (
        "--pull-timeout",
        cc.positive_float,
        "pull_timeout_s",
        "seconds without a get before a pull subscriber is marked inactive",
    ),
    (
        "--window-hold",
        cc.positive_float,
        "window_hold_s",
        "seconds of its own work a push subscriber holds at most (its prefetch caps it)",
    ),
    (
        "--max-attempts",
        cc.positive_int,
        "max_attempts",
        "failed pushes in a row before a subscriber is inactive; handler failures before an "
        "event is dead-lettered",
    ),
    (
        "--partition-weight",
        cc.non_negative_int,
        "partition_weight",
        "load of owning one partition, in events",
    ),
    (
        "--partition-idle",
        cc.positive_float,
        "partition_idle_s",
        "seconds an empty partition is kept",
    ),
    (
        "--dispatch-linger",
        cc.non_negative_float,
        "dispatch_linger_s",
        "seconds a dispatcher waits to fill a batch smaller than the free prefetch (0: none)",
    ),
    (
        "--small-delay",
        cc.positive_float,
        "small_delay_s",
        "a push slower than this many seconds is a small delay",
    ),
    (
        "--long-delay",
        cc.positive_float,
        "long_delay_s",
        "a push slower than this many seconds is a long delay",
    ),
    (
        "--long-delay-count",
        cc.positive_int,
        "long_delay_count",
        "long delays within the window that move a member's queued partitions",
    ),
    (
        "--long-delay-window",
        cc.positive_float,
        "long_delay_window_s",
        "seconds over which long delays are counted",
    ),
    (
        "--rebalance-threshold",
        cc.non_negative_int,
        "rebalance_threshold",
        "a joining member takes idle partitions from members owning more than this many above it",
    ),
    (
        "--member-expiry",
        cc.non_negative_float,
        "member_expiry_s",
        "seconds an inactive member (declared dead, timed out) may give no sign of life "
        "before it is forgotten, as if it unsubscribed; the last member of a group other "
        "than default is kept (0: never)",
    ),
    (
        "--rate-window",
        cc.positive_float,
        "rate_window_s",
        "seconds over which status reports events/s accepted and acknowledged",
    ),
    (
        "--dedupe-max-ids",
        cc.positive_int,
        "dedupe_max_ids",
        "ids remembered for duplicate detection",
    ),
    (
        "--dedupe-max-age",
        cc.positive_float,
        "dedupe_max_age_s",
        "seconds an id is remembered for duplicate detection",
    ),
)
"""(flag, parser, ChannelConfig field, help) of every channel setting ``serve`` takes."""


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _add_serve(sub: Any) -> None:
    defaults = ChannelConfig()
    serve = sub.add_parser(
        "serve",
        help="run a broker (starts an embedded name server when none answers)",
        description="Run a broker. Starts an embedded name server on --ns-host/--ns-port "
        "when none answers there. Stops cleanly on SIGTERM or Ctrl-C.",
    )
    cc.add_ns_flags(serve)
    serve.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE.toml",
        help="read settings from a TOML file: its keys are the long flags below (with - or "
        "_), its values what they take; flags given here override it (docs/"
        "broker.example.toml lists every key with its default)",
    )
    serve.add_argument(
        "--print-config",
        action="store_true",
        help="print the settings in effect (file and flags) as TOML, and exit",
    )
    serve.add_argument(
        "--channel",
        action="append",
        default=[],
        metavar="NAME",
        help="create this channel at start-up (repeatable)",
    )
    cc.add_ids_flag(
        serve,
        IdScope.PUBLISHER.value,
        "for the channels this broker creates: its --channel ones and those clients create "
        "without asking; an existing channel keeps its own (default %(default)s)",
    )
    serve.add_argument("--broker-id", default="b1", help="broker id (default %(default)s)")
    serve.add_argument("--host", default=DEFAULT_HOST, help="bind address (default %(default)s)")
    serve.add_argument(
        "--advertise",
        type=cc.host_name,
        default=None,
        metavar="HOST",
        help="the host clients reach this broker at, put in the URIs the name server hands "
        "out (default: --host); needed when --host is 0.0.0.0 or ::, which no client can "
        "connect to",
    )
    serve.add_argument(
        "--port", type=cc.port_number, default=0, help="broker port (default 0: any free port)"
    )
    where = serve.add_mutually_exclusive_group()
    where.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"directory of the durable store (SQLite, WAL); default ./{DEFAULT_DATA_DIR}/"
        "<broker-id>",
    )
    where.add_argument(
        "--memory",
        action="store_true",
        help="keep the backup queue in memory only (survives kill_queues, not a restart)",
    )
    serve.add_argument(
        "--sync",
        choices=[level.lower() for level in SYNC_LEVELS],
        default=DEFAULT_SYNC.lower(),
        help="SQLite synchronous level: normal loses nothing on a process crash, full "
        "nothing on power loss either (default %(default)s)",
    )
    for flag, kind, field, text in CHANNEL_FLAGS:
        serve.add_argument(
            flag, type=kind, default=getattr(defaults, field), help=f"{text} (default %(default)s)"
        )
    serve.add_argument(
        "--allow-fault-injection",
        action="store_true",
        help="accept fault-injection admin calls (tests and demos only)",
    )
    serve.add_argument(
        "--users",
        type=Path,
        default=None,
        metavar="FILE",
        help="users file (python -m channel_server users add ...): more users than the "
        "owner of the local token, with per-channel permissions",
    )
    serve.add_argument(
        "--insecure-name-server",
        action="store_true",
        help="use an existing name server that does not authenticate (a stock pyro5-ns): "
        "any local process could then rewrite its names",
    )
    cc.add_bind_flags(serve, "host", "ns_host")  # it may embed a name server on --ns-host
    add_limit_flags(serve)
    add_http_flags(serve)


BYTE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def byte_count(text: str) -> int:
    """A positive number of bytes, optionally with a binary unit: 512K, 256M, 1G."""
    unit = BYTE_UNITS.get(text[-1:].upper(), 1)
    digits = text[:-1] if unit > 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes (or K/M/G): {text}")
    return int(digits) * unit


def host_list(text: str) -> tuple[str, ...]:
    """Comma-separated hosts ("*": any host)."""
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    if not hosts:
        raise argparse.ArgumentTypeError("must name at least one host (or *)")
    return hosts


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    """``serve``'s caps on what clients may make it hold, and where it connects out."""
    broker, channel = BrokerConfig(), ChannelConfig()
    limits = parser.add_argument_group("limits")
    limits.add_argument(
        "--max-channels",
        type=cc.positive_int,
        default=broker.max_channels,
        metavar="N",
        help="most channels this broker hosts (channels its store restores always come "
        "back); creating one more is refused with LimitReached (default %(default)s)",
    )
    limits.add_argument(
        "--max-members",
        type=cc.positive_int,
        default=channel.max_members,
        metavar="N",
        help="most subscribers (push and pull, every group) per channel; at the cap a new "
        "one replaces the member inactive longest, or is refused with LimitReached "
        "(default %(default)s)",
    )
    limits.add_argument(
        "--max-queued-bytes",
        type=byte_count,
        default=channel.max_queued_bytes,
        metavar="BYTES",
        help="most bytes of unacknowledged events (ids and payloads) per channel, beside "
        "--capacity; publishing past it is refused with QueueFull (default %(default)s, "
        "256M; units K, M, G)",
    )
    limits.add_argument(
        "--callback-hosts",
        type=host_list,
        default=channel.callback_hosts,
        metavar="HOST,...",
        help="hosts a push subscriber's callback may name besides the address it connected "
        "from (* = any); default: only that address",
    )


def limits_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ChannelConfig fields set by add_limit_flags."""
    return {
        "max_members": args.max_members,
        "max_queued_bytes": args.max_queued_bytes,
        "callback_hosts": args.callback_hosts,
    }


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    tuning = {field: getattr(args, _dest(flag)) for flag, _, field, _ in CHANNEL_FLAGS}
    try:
        channel = replace(ChannelConfig(), **tuning, **limits_from_args(args))
    except ValueError as exc:  # the one check of ChannelConfig: room for a largest event
        raise InvalidArgument("--max-queued-bytes", str(exc)) from None
    if args.advertise is None and cc.is_unspecified(args.host):
        raise InvalidArgument(
            "--advertise",
            f"--host {args.host} listens on every interface, but is no address a client can "
            "connect to: give the host clients should use (--advertise HOST)",
        )
    return BrokerConfig(
        broker_id=check_name("broker-id", args.broker_id),
        host=args.host,
        advertise=args.advertise,
        port=args.port,
        ns_host=args.ns_host,
        ns_port=args.ns_port,
        channels=tuple(check_name("channel", c) for c in args.channel),
        id_scope=IdScope(args.id_scope),
        allow_fault_injection=args.allow_fault_injection,
        insecure_name_server=args.insecure_name_server,
        transport=cc.transport_from_args(args),
        max_channels=args.max_channels,
        channel=channel,
        http=http_from_args(args),
    )


def serve(args: argparse.Namespace) -> int:
    from channel_server.access import Access
    from channel_server.broker import Broker  # the heavy part, only for this command
    from channel_server.store import MemoryStore, Store
    from channel_server.store.sqlite import SQLiteStore
    from channel_server.users import UsersFile

    config = config_from_args(args)
    if args.print_config:
        print(serve_settings(args), end="")
        return cc.EXIT_OK
    stop = cc.stop_on_signals()
    data_dir = None
    if args.memory:
        store: Store = MemoryStore()
    else:
        data_dir = args.data_dir or Path(DEFAULT_DATA_DIR) / config.broker_id
        try:
            store = SQLiteStore(data_dir, args.sync)
        except StoreError as exc:  # damaged, or in use by another broker
            return cc.fail(str(exc), cc.EXIT_UNAVAILABLE)
    token = credentials.ensure_token(credentials.state_root(), data_dir)
    users = UsersFile.load(args.users) if args.users else None
    broker = Broker(config, store, token, Access(token, users))
    try:
        broker.start()
    except (OSError, Pyro5.errors.PyroError, ChannelError) as exc:
        broker.stop()
        code = cc.EXIT_NOT_AUTHORIZED if isinstance(exc, NotAuthorized) else cc.EXIT_UNAVAILABLE
        return cc.fail(f"cannot start the broker: {exc}", code)
    ns_kind = "embedded" if broker.ns.embedded else "existing"
    print(
        f"broker {config.broker_id} ready at {broker.uri}; name server "
        f"{config.ns_host}:{broker.ns.port} ({ns_kind}); channels: "
        f"{', '.join(broker.channel_names()) or '-'}"
        + (f"; http {broker.monitor.url}" if broker.monitor else ""),
        flush=True,
    )
    try:
        while not stop.wait(STOP_POLL_S):
            pass
    finally:
        log.info("stopping broker %s", config.broker_id)
        broker.stop()
    return cc.EXIT_OK


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


def _registered_channels(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """channel name -> (uri, broker id), from the name server."""
    with locate_ns(args.ns_host, args.ns_port) as ns:
        entries = ns.list(prefix=NS_CHANNEL_PREFIX, return_metadata=True)
    return {
        name[len(NS_CHANNEL_PREFIX) :]: (uri, broker_tag(meta) or "?")
        for name, (uri, meta) in sorted(entries.items())
    }


def list_channels(args: argparse.Namespace) -> int:
    channels = _registered_channels(args)
    rows = [_channel_row(name, uri, broker) for name, (uri, broker) in channels.items()]
    if args.json:
        print(json.dumps(rows))
        return cc.EXIT_OK
    if not rows:
        print("no channels")
    for row in rows:
        print(
            f"{row['channel']}  broker={row['broker']}  groups={row['groups']}  "
            f"members={row['members']}  backlog={row['backlog']}"
            + ("" if row["reachable"] else "  (broker unreachable)")
        )
    return cc.EXIT_OK


def _channel_row(channel: str, uri: str, broker: str) -> dict[str, Any]:
    try:
        with make_proxy(uri, LIST_TIMEOUT_S) as proxy:
            stats = proxy.stats()
    except Pyro5.errors.PyroError:
        stats = None
    return channel_row(channel, broker, stats)


def show_status(args: argparse.Namespace) -> int:
    if args.watch:
        if args.json:
            raise InvalidArgument("--watch", "refreshes the tables; it does not take --json")
        from channel_server.monitor.watch import watch

        return watch(make_console(), lambda: status_renderables(_fetch_status(args)), args)
    channels = _fetch_status(args)
    if args.json:  # unreachable ones on stderr: stdout stays one JSON document
        for name, broker, stats in channels:
            if isinstance(stats, Exception):
                print(f"{name} on broker {broker}: unreachable ({stats})", file=sys.stderr)
        print(json.dumps([channel_status(b, s) for _, b, s in channels if isinstance(s, dict)]))
        return cc.EXIT_OK
    console = make_console()
    for part in status_renderables(channels):
        console.print(part)
    return cc.EXIT_OK


def _fetch_status(args: argparse.Namespace) -> list[tuple[str, str, dict[str, Any] | Exception]]:
    """(channel, broker, its stats or why its broker did not answer) of ``status``."""
    channels = _registered_channels(args)
    if args.channel is not None:
        if args.channel not in channels:
            raise UnknownChannel(args.channel)
        channels = {args.channel: channels[args.channel]}
    fetched: list[tuple[str, str, dict[str, Any] | Exception]] = []
    for name, (uri, broker) in channels.items():
        try:
            with make_proxy(uri, LIST_TIMEOUT_S) as channel:
                fetched.append((name, broker, channel.stats()))
        except Pyro5.errors.PyroError as exc:
            fetched.append((name, broker, exc))
    return fetched


def dead_letters(args: argparse.Namespace) -> int:
    """List or replay dead letters. Ids (``--id``) that name none are not silently passed
    over: they are named, and the exit code is EXIT_PARTIAL."""
    uri = resolve_channel(args.ns_host, args.ns_port, args.channel)
    unknown: list[str] = []
    with make_proxy(uri, LIST_TIMEOUT_S) as channel:
        letters = channel.dead_letters() if args.ids or not args.replay else []
        if args.ids:
            letters = [d for d in letters if set(args.ids) & _letter_names(d)]
            named = set().union(*map(_letter_names, letters))
            unknown = list(dict.fromkeys(i for i in args.ids if i not in named))
        if args.replay:
            chosen = None if not args.ids else [i for i in args.ids if i not in unknown]
            count = 0 if chosen == [] else channel.replay_dead_letters(chosen)
            print(f"{args.channel}: {count} dead letters queued again")
    if not args.replay and args.json:
        print(json.dumps(letters))
    elif not args.replay:
        render_dead_letters(make_console(), args.channel, letters)
    if unknown:
        missing = f"not in the dead-letter queue of {args.channel}: {', '.join(unknown)}"
        return cc.fail(missing, cc.EXIT_PARTIAL)
    return cc.EXIT_OK


def _letter_names(letter: dict[str, Any]) -> set[str]:
    """What ``--id`` may call a dead letter: its id, or its uid ``publisher_id/id``."""
    return {letter["id"], event_uid(letter["publisher_id"], letter["id"])}


def run_nameserver(args: argparse.Namespace) -> int:
    from channel_server.access import Access
    from channel_server.nameservice import GuardedNameServerDaemon
    from channel_server.users import UsersFile

    token = credentials.ensure_token(credentials.state_root())
    users = UsersFile.load(args.users) if args.users else None
    stop = cc.stop_on_signals()
    try:
        daemon = GuardedNameServerDaemon(args.ns_host, args.ns_port, Access(token, users))
    except OSError as exc:
        exc = bind_failure(exc, "name server", args.ns_host, args.ns_port)
        return cc.fail(f"cannot start the name server: {exc}", cc.EXIT_UNAVAILABLE)
    loop = threading.Thread(target=daemon.requestLoop, name="nameserver", daemon=True)
    loop.start()
    print(f"name server ready at {args.ns_host}:{daemon.sock.getsockname()[1]}", flush=True)
    try:
        while not stop.wait(STOP_POLL_S):
            pass
    finally:
        daemon.shutdown()
        loop.join(STOP_POLL_S * 5)
        daemon.close()
    return cc.EXIT_OK


def forget_member(args: argparse.Namespace) -> int:
    """The ``forget`` subcommand: exit 5 when there is no such member, 4 when it is active
    and not forced."""
    uri = resolve_channel(args.ns_host, args.ns_port, args.channel)
    try:
        with make_proxy(uri, LIST_TIMEOUT_S) as channel:
            gone = channel.forget(args.member, args.group, args.force)
    except NotSubscribed as exc:
        return cc.fail(str(exc), cc.EXIT_NOT_SUBSCRIBED)
    except MemberActive as exc:
        return cc.fail(f"{exc} (--force)", cc.EXIT_REFUSED)
    except Pyro5.errors.CommunicationError as exc:
        return cc.fail(f"broker unavailable: {exc}", cc.EXIT_UNAVAILABLE)
    print(forget_summary(gone))
    return cc.EXIT_OK


def forget_summary(gone: dict[str, Any]) -> str:
    """One line saying what ``forget`` removed and where its work went."""
    who = f"{gone['channel']}: {gone['member_id']} forgotten from group {gone['group']}"
    if gone["was_active"]:
        line = (
            f"{who} (it was active: its {gone['partitions']} partitions and "
            f"{gone['in_flight']} events in flight go to the others)"
        )
    else:
        line = f"{who} (it was inactive: {gone['inactive_reason'] or 'no reason given'})"
    if gone["group_dropped"]:
        line += f"; group {gone['group']} had no member left and was dropped with its backlog"
    return line


COMMANDS = {
    "serve": serve,
    "list": list_channels,
    "status": show_status,
    "dead-letters": dead_letters,
    "forget": forget_member,
    "nameserver": run_nameserver,
    "users": run_users,
}


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
