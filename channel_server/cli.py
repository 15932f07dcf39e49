"""``python -m channel_server``: run a broker, list channels."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from typing import Any

import Pyro5.errors

from channel_server import cli_common as cc
from channel_server.config import BrokerConfig, ChannelConfig
from channel_server.errors import ChannelError
from channel_server.wire import (
    BROKER_TAG_PREFIX,
    DEFAULT_HOST,
    NS_CHANNEL_PREFIX,
    check_name,
    locate_ns,
    make_proxy,
)

log = logging.getLogger("channel_server")
LIST_TIMEOUT_S = 3.0
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
    return parser


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
        "--channel",
        action="append",
        default=[],
        metavar="NAME",
        help="create this channel at start-up (repeatable)",
    )
    serve.add_argument("--broker-id", default="b1", help="broker id (default %(default)s)")
    serve.add_argument("--host", default=DEFAULT_HOST, help="bind address (default %(default)s)")
    serve.add_argument(
        "--port", type=cc.port_number, default=0, help="broker port (default 0: any free port)"
    )
    serve.add_argument(
        "--memory",
        action="store_true",
        help="keep the backup queue in memory (the only store so far; the default)",
    )
    serve.add_argument(
        "--capacity",
        type=cc.positive_int,
        default=defaults.capacity,
        help="most unacknowledged events per channel (default %(default)s)",
    )
    serve.add_argument(
        "--ack-timeout",
        type=cc.positive_float,
        default=defaults.ack_timeout_s,
        help="seconds a push may take before it counts as failed (default %(default)s)",
    )
    serve.add_argument(
        "--max-attempts",
        type=cc.positive_int,
        default=defaults.max_attempts,
        help="failed pushes in a row before a subscriber is inactive (default %(default)s)",
    )
    serve.add_argument(
        "--partition-weight",
        type=cc.non_negative_int,
        default=defaults.partition_weight,
        help="load of owning one partition, in events (default %(default)s)",
    )
    serve.add_argument(
        "--partition-idle",
        type=cc.positive_float,
        default=defaults.partition_idle_s,
        help="seconds an empty partition is kept (default %(default)s)",
    )
    serve.add_argument(
        "--allow-fault-injection",
        action="store_true",
        help="accept fault-injection admin calls (tests and demos only)",
    )


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    channel = replace(
        ChannelConfig(),
        capacity=args.capacity,
        ack_timeout_s=args.ack_timeout,
        max_attempts=args.max_attempts,
        partition_weight=args.partition_weight,
        partition_idle_s=args.partition_idle,
    )
    return BrokerConfig(
        broker_id=check_name("broker-id", args.broker_id),
        host=args.host,
        port=args.port,
        ns_host=args.ns_host,
        ns_port=args.ns_port,
        channels=tuple(check_name("channel", c) for c in args.channel),
        allow_fault_injection=args.allow_fault_injection,
        channel=channel,
    )


def serve(args: argparse.Namespace) -> int:
    from channel_server.broker import Broker  # the heavy part, only for this command
    from channel_server.store import MemoryStore

    config = config_from_args(args)
    stop = cc.stop_on_signals()
    broker = Broker(config, MemoryStore())
    try:
        broker.start()
    except (OSError, Pyro5.errors.PyroError) as exc:
        broker.stop()
        return cc.fail(f"cannot start the broker: {exc}", cc.EXIT_UNAVAILABLE)
    ns_kind = "embedded" if broker.ns.embedded else "existing"
    print(
        f"broker {config.broker_id} ready at {broker.uri}; name server "
        f"{config.ns_host}:{broker.ns.port} ({ns_kind}); channels: "
        f"{', '.join(broker.channel_names()) or '-'}",
        flush=True,
    )
    try:
        while not stop.wait(STOP_POLL_S):
            pass
    finally:
        log.info("stopping broker %s", config.broker_id)
        broker.stop()
    return cc.EXIT_OK


def list_channels(args: argparse.Namespace) -> int:
    ns = locate_ns(args.ns_host, args.ns_port)
    with ns:
        entries = ns.list(prefix=NS_CHANNEL_PREFIX, return_metadata=True)
    rows = [_channel_row(name, uri, meta) for name, (uri, meta) in sorted(entries.items())]
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


def _channel_row(ns_name: str, uri: str, meta: Any) -> dict[str, Any]:
    broker = next(
        (t[len(BROKER_TAG_PREFIX) :] for t in meta if t.startswith(BROKER_TAG_PREFIX)), "?"
    )
    row: dict[str, Any] = {
        "channel": ns_name[len(NS_CHANNEL_PREFIX) :],
        "broker": broker,
        "reachable": True,
        "groups": "?",
        "members": "?",
        "backlog": "?",
    }
    try:
        with make_proxy(uri, LIST_TIMEOUT_S) as channel:
            stats = channel.stats()
    except Pyro5.errors.PyroError:
        row["reachable"] = False
        return row
    groups = stats["groups"]
    row["groups"] = len(groups)
    row["members"] = sum(len(g["members"]) for g in groups.values())
    row["backlog"] = stats["unacked"]
    return row


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cc.setup_logging(args.log_level)
    try:
        if args.command == "serve":
            return serve(args)
        return list_channels(args)
    except ChannelError as exc:
        return cc.fail(str(exc), cc.EXIT_UNAVAILABLE)


if __name__ == "__main__":
    sys.exit(main())
