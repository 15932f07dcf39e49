"""The operator's commands of ``python -m channel_server``: ``list``, ``status``,
``dead-letters``, ``forget`` and ``delete``, each asking a running broker (through the
name server)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import Pyro5.errors

from channel_client import cli_common as cc
from channel_client.lookup import broker_of_channel, resolve_channel
from channel_server.errors import (
    ChannelInUse,
    InvalidArgument,
    MemberActive,
    NotAuthorized,
    NotSubscribed,
    UnknownChannel,
)
from channel_server.events import event_uid
from channel_server.monitor.flags import add_watch_flags
from channel_server.monitor.views import channel_row, channel_status
from channel_server.status import make_console, render_dead_letters, status_renderables
from channel_server.wire import NS_CHANNEL_PREFIX, broker_tag, locate_ns, make_proxy

LIST_TIMEOUT_S = 3.0


def add_inspect_commands(sub: Any) -> None:
    """The ``list``, ``status`` and ``dead-letters`` subcommands."""
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


def add_forget_command(sub: Any) -> None:
    forget = cc.add_channel_command(
        sub,
        "forget",
        "remove a member of a channel now (admin)",
        "Remove a member from its group now, with its subscription in the store. "
        "An inactive member (declared dead or timed out: 'NO' in status) holds nothing and "
        "goes at once; an active one is refused (exit 4) unless --force. The broker forgets "
        "inactive members by itself after --member-expiry. Forgetting the last member of a "
        "group other than default drops the group and its backlog, like an unsubscribe. "
        "Exit 5 when there is no such member.",
    )
    forget.add_argument("member", type=cc.plain_name, help="the member's subscriber id")
    cc.add_group_flag(forget)
    forget.add_argument(
        "--force",
        action="store_true",
        help="remove an active member too, as if it unsubscribed: its partitions and the "
        "events it holds go to the others (a subscriber still running subscribes again, as "
        "a new member)",
    )


def add_delete_command(sub: Any) -> None:
    delete = cc.add_channel_command(
        sub,
        "delete",
        "delete a channel or topic and everything stored for it (admin)",
        "Stop serving a channel and forget everything its broker stored for it: "
        "events, groups, members, dead letters, the delivered-id window. Its name is free "
        "again (a channel made later with it starts empty) and no longer counts against "
        "--max-channels. A channel that still has members, events not acknowledged or dead "
        "letters is refused (exit 4) unless --force. Exit 2 when there is no such channel.",
    )
    delete.add_argument(
        "--force",
        action="store_true",
        help="delete it even with members, events not acknowledged or dead letters: they "
        "are dropped with it (running subscribers find it gone)",
    )


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
    found = (_channel_row(name, uri, broker) for name, (uri, broker) in channels.items())
    rows = [row for row in found if row is not None]
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


def _channel_row(channel: str, uri: str, broker: str) -> dict[str, Any] | None:
    """A channel's line; None for one this user has no permission on (not listed, as
    on the live page)."""
    try:
        with make_proxy(uri, LIST_TIMEOUT_S) as proxy:
            stats = proxy.stats()
    except NotAuthorized:
        return None
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
    unreachable = any(isinstance(stats, Exception) for _, _, stats in channels)
    code = cc.EXIT_UNAVAILABLE if unreachable else cc.EXIT_OK  # (a script's `status || alert`)
    if args.json:  # unreachable ones on stderr: stdout stays one JSON document
        for name, broker, stats in channels:
            if isinstance(stats, Exception):
                print(f"{name} on broker {broker}: unreachable ({stats})", file=sys.stderr)
        print(json.dumps([channel_status(b, s) for _, b, s in channels if isinstance(s, dict)]))
        return code
    console = make_console()
    for part in status_renderables(channels):
        console.print(part)
    return code


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


def delete_channel(args: argparse.Namespace) -> int:
    """The ``delete`` subcommand: exit 2 when there is no such channel, 4 when it holds
    something and is not forced."""
    with make_proxy(broker_of_channel(args.ns_host, args.ns_port, args.channel), 10.0) as b:
        try:
            held = b.delete_channel(args.channel, args.force)
        except ChannelInUse as exc:
            return cc.fail(f"{exc} (--force)", cc.EXIT_REFUSED)
    print(
        f"{args.channel} deleted, with {held['members']} members, {held['unacked']} events "
        f"not acknowledged and {held['dead_letters']} dead letters"
    )
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
