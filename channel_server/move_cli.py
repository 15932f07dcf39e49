"""``channel_server move`` and ``rebalance``: hand channels between brokers that share one
PostgreSQL database (README "Running on several machines"), what Kafka's partition
reassignment and NATS's stream move do. The owner stops serving the channel and releases its
lease reserved for the target; the target takes it at its next lease round and restores it
from the database; clients follow through the name server."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

import Pyro5.errors

from channel_client import cli_common as cc
from channel_server.errors import ChannelError
from channel_server.names import NS_BROKER_PREFIX, NS_CHANNEL_PREFIX, broker_tag
from channel_server.wire import locate_ns, make_proxy

CALL_TIMEOUT_S = 10.0
POLL_S = 0.2


def add_move_commands(sub: Any) -> None:
    move = cc.add_channel_command(
        sub,
        "move",
        "hand a channel to another broker of the same database (admin)",
        "Hand CHANNEL to broker --to, which shares the owner's PostgreSQL store "
        "(--store): the owner stops serving it and releases its lease for the target, "
        "which restores it from the database and registers it in the name server. Events "
        "wait in the database meanwhile: none is lost or reordered; clients follow "
        "through the name server. Exit 3 when the move did not finish within --wait.",
    )
    move.add_argument("--to", required=True, type=cc.plain_name, help="target broker id")
    move.add_argument("--wait", type=cc.positive_float, default=30.0, help="seconds (30)")
    rebalance = sub.add_parser(
        "rebalance",
        help="spread channels evenly over the brokers of one database (admin)",
        description="Move channels from the brokers holding the most to those holding the "
        "fewest until no two differ by more than one; only brokers serving with leases "
        "(--store postgresql://) count. --dry-run prints the moves without making them.",
    )
    cc.add_ns_flags(rebalance)
    rebalance.add_argument("--dry-run", action="store_true", help="only print the moves")
    rebalance.add_argument("--wait", type=cc.positive_float, default=30.0, help="per move")


def plan_rebalance(owners: dict[str, str], brokers: list[str]) -> list[tuple[str, str, str]]:
    """Moves (channel, from, to) that leave every broker within one channel of the others,
    taking from the fullest and giving to the emptiest, fewest moves first."""
    load = Counter({broker: 0 for broker in brokers})
    load.update(owner for owner in owners.values() if owner in load)
    held = {b: sorted(c for c, o in owners.items() if o == b) for b in brokers}
    moves = []
    while load:
        full = max(sorted(load), key=lambda b: load[b])
        empty = min(sorted(load), key=lambda b: load[b])
        if load[full] - load[empty] <= 1:
            break
        channel = held[full].pop()
        moves.append((channel, full, empty))
        load[full] -= 1
        load[empty] += 1
    return moves


def _owners(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """(channel -> owner broker id, broker id -> URI) from the name server."""
    with locate_ns(args.ns_host, args.ns_port) as ns:
        channels = ns.list(prefix=NS_CHANNEL_PREFIX, return_metadata=True)
        brokers = ns.list(prefix=NS_BROKER_PREFIX)
    owners = {
        name[len(NS_CHANNEL_PREFIX) :]: broker_tag(meta) or "?"
        for name, (_, meta) in channels.items()
    }
    return owners, {name[len(NS_BROKER_PREFIX) :]: uri for name, uri in brokers.items()}


def _move(args: argparse.Namespace, channel: str, owner_uri: str, to: str) -> float:
    """Ask the owner to hand the channel over; wait for the target to register it."""
    started = time.monotonic()
    with make_proxy(owner_uri, CALL_TIMEOUT_S) as broker:
        broker.move_channel(channel, to)
    deadline = started + args.wait
    while time.monotonic() < deadline:
        if _owners(args)[0].get(channel) == to:
            return time.monotonic() - started
        time.sleep(POLL_S)  # polling the name server for the target's registration
    raise TimeoutError(f"channel {channel} not registered by broker {to} within {args.wait} s")


def move_channel(args: argparse.Namespace) -> int:
    owners, brokers = _owners(args)
    owner = owners.get(args.channel)
    if owner is None:
        return cc.fail(f"unknown channel {args.channel!r}", cc.EXIT_USAGE)
    if owner not in brokers:
        return cc.fail(f"channel {args.channel} is not served by any broker now", cc.EXIT_ERROR)
    return _run_moves(args, [(args.channel, owner, args.to)], brokers)


def rebalance(args: argparse.Namespace) -> int:
    owners, brokers = _owners(args)
    leased = [b for b, uri in sorted(brokers.items()) if _serves_with_leases(uri)]
    moves = plan_rebalance({c: o for c, o in owners.items() if o in leased}, leased)
    if not leased:
        return cc.fail(
            "no broker here moves channels: rebalancing needs brokers sharing a database "
            "(--store postgresql://...)",
            cc.EXIT_USAGE,
        )
    if not moves:
        print(f"balanced: {len(owners)} channels over {len(leased)} brokers")
        return cc.EXIT_OK
    if args.dry_run:
        for channel, owner, to in moves:
            print(f"would move {channel}: {owner} -> {to}")
        return cc.EXIT_OK
    return _run_moves(args, moves, brokers)


def _serves_with_leases(uri: str) -> bool:
    try:
        with make_proxy(uri, CALL_TIMEOUT_S) as broker:
            return bool(broker.info().get("leases"))
    except (ChannelError, Pyro5.errors.PyroError):
        return False


def _run_moves(
    args: argparse.Namespace, moves: list[tuple[str, str, str]], brokers: dict[str, str]
) -> int:
    for channel, owner, to in moves:
        try:
            seconds = _move(args, channel, brokers[owner], to)
        except ChannelError as exc:
            return cc.fail(f"move of {channel} refused: {exc}", cc.EXIT_REFUSED)
        except (TimeoutError, Pyro5.errors.CommunicationError) as exc:
            return cc.fail(f"move of {channel}: {exc}", cc.EXIT_UNAVAILABLE)
        print(f"moved {channel}: {owner} -> {to} in {seconds:.2f} s", flush=True)
    return cc.EXIT_OK
