"""``serve``'s flags (every channel setting, the limits, the store) and the BrokerConfig
they make."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from channel_client import cli_common as cc
from channel_server.config import MAX_LEASE_S, BrokerConfig, ChannelConfig
from channel_server.cpu_pin import cpu_choice
from channel_server.dispatch import SLOW_TASK_S
from channel_server.errors import InvalidArgument
from channel_server.events import IdScope
from channel_server.lease_keeper import RENEWALS_PER_TERM
from channel_server.monitor.flags import add_http_flags, http_from_args
from channel_server.store.dsn import STORE_DSN_ENV, postgres_dsn
from channel_server.store.sqlite import DEFAULT_SYNC, SYNC_LEVELS
from channel_server.wire import DEFAULT_HOST, check_name

DEFAULT_DATA_DIR = "pubsub-data"


CHANNEL_FLAGS = tuple(
    (f.metadata["flag"], getattr(cc, f.metadata["kind"]), f.name, f.metadata["help"])
    for f in fields(ChannelConfig)
    if "flag" in f.metadata
)
"""(flag, parser, ChannelConfig field, help) of every channel setting ``serve`` takes."""


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_serve_command(sub: Any) -> None:
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
    where.add_argument(
        "--store",
        type=postgres_dsn,
        default=None,
        metavar="DSN",
        help="keep the backup queue in PostgreSQL (postgresql://user@host:port/db; needs the "
        f"postgres extra); without this flag, --data-dir and --memory, {STORE_DSN_ENV} is "
        "used when set, so the password need not be on the command line (libpq's PGPASSWORD "
        "and ~/.pgpass work too)",
    )
    serve.add_argument(
        "--lease",
        type=lease_seconds,
        default=BrokerConfig().lease_s,
        metavar="SECONDS",
        help="with --store postgresql://: the term of this broker's channel leases (renewed "
        f"{RENEWALS_PER_TERM} times per term); when the owner of a channel stops renewing "
        "(killed, frozen, cut off), another broker of the database takes the channel over "
        f"within about this long (at most {MAX_LEASE_S:g}; default %(default)s)",
    )
    serve.add_argument(
        "--sync",
        choices=[level.lower() for level in SYNC_LEVELS],
        default=DEFAULT_SYNC.lower(),
        help="SQLite synchronous level: normal loses nothing on a process crash, full "
        "nothing on power loss either (default %(default)s)",
    )
    serve.add_argument(
        "--cpu",
        type=cpu_choice,
        default=BrokerConfig().cpu,
        metavar="auto|all|N",
        help="where the broker's threads run: auto, one CPU, the idlest at start (its "
        "threads pass the GIL to one another, cheaper within one core: a fifth less CPU "
        "per event); all, any CPU, as the OS schedules them; or CPU N (default %(default)s)",
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
    serve.add_argument(
        "--names-check",
        type=cc.positive_float,
        default=BrokerConfig().names_check_s,
        metavar="SECONDS",
        help="with a name server of another process: how often to check that this "
        "broker's names are there and register again those it lost (a restarted name "
        "server knows none; default %(default)s)",
    )
    cc.add_bind_flags(serve, "host", "ns_host")  # it may embed a name server on --ns-host
    add_limit_flags(serve)
    add_http_flags(serve)


BYTE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def byte_count(text: str) -> int:
    """A positive number of bytes, optionally with a binary unit: 512K, 256M, 1G."""
    count = byte_budget(text)
    if count == 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes (or K/M/G): {text}")
    return count


def byte_budget(text: str) -> int:
    """A number of bytes, 0 allowed, optionally with a binary unit: 0, 512K, 16M."""
    unit = BYTE_UNITS.get(text[-1:].upper(), 1)
    digits = text[:-1] if unit > 1 else text
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"must be a number of bytes (or K/M/G): {text}")
    return int(digits) * unit


def host_list(text: str) -> tuple[str, ...]:
    """Comma-separated hosts ("*": any host)."""
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    if not hosts:
        raise argparse.ArgumentTypeError("must name at least one host (or *)")
    return hosts


def lease_seconds(text: str) -> float:
    """A lease term: positive, and short enough that a take-over is prompt."""
    value = cc.positive_float(text)
    if value > MAX_LEASE_S:
        raise argparse.ArgumentTypeError(f"at most {MAX_LEASE_S:g} seconds")
    return value


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    """``serve``'s caps on what clients may make it hold, and where it connects out."""
    broker, channel = BrokerConfig(), ChannelConfig()
    limits = parser.add_argument_group("limits")
    cc.add_count_flag(
        limits,
        "--max-channels",
        broker.max_channels,
        "most channels this broker hosts (channels its store restores always come back); "
        "creating one more is refused with LimitReached",
    )
    cc.add_count_flag(
        limits,
        "--push-threads",
        broker.push_threads,
        "threads making pushes, for every channel: a push to a frozen subscriber holds "
        "one until --ack-timeout, so N frozen at once stall every push that long",
    )
    cc.add_count_flag(
        limits,
        "--push-concurrency",
        broker.push_concurrency,
        "of the --push-threads, those making every push (fewer make fuller pushes: less "
        f"CPU per event); the others make a full push, or one while a push has run over "
        f"{SLOW_TASK_S:g} s (a frozen subscriber)",
    )
    cc.add_count_flag(
        limits,
        "--max-members",
        channel.max_members,
        "most subscribers (push and pull, every group) per channel; at the cap a new one "
        "replaces the member inactive longest, or is refused with LimitReached",
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
        "--payload-memory",
        type=byte_budget,
        default=channel.payload_memory_bytes,
        metavar="BYTES",
        help="bytes of queued payloads per channel kept in memory over a durable store; the "
        "payloads of events queued past them are read back from the store when delivered "
        "(default %(default)s, 16M; units K, M, G; 0: read every payload back)",
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
        "payload_memory_bytes": args.payload_memory,
        "callback_hosts": args.callback_hosts,
    }


def _push_concurrency(asked: int, threads: int) -> int:
    """The default follows fewer ``--push-threads`` down; more than them, asked for, is
    refused."""
    if asked <= threads:
        return asked
    if asked == BrokerConfig().push_concurrency:
        return threads
    raise InvalidArgument(
        "--push-concurrency",
        f"{asked} is more than the --push-threads ({threads}) there are to make pushes",
    )


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    tuning = {field: getattr(args, _dest(flag)) for flag, _, field, _ in CHANNEL_FLAGS}
    try:
        channel = replace(ChannelConfig(), **tuning, **limits_from_args(args))
    except ValueError as exc:  # the one check of ChannelConfig: room for a largest event
        raise InvalidArgument("--max-queued-bytes", str(exc)) from None
    concurrency = _push_concurrency(args.push_concurrency, args.push_threads)
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
        cpu=args.cpu,
        max_channels=args.max_channels,
        push_threads=args.push_threads,
        push_concurrency=concurrency,
        lease_s=args.lease,
        names_check_s=args.names_check,
        channel=channel,
        http=http_from_args(args),
    )
