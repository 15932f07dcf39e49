"""``python -m publisher``: publish synthetic events to a channel."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import Pyro5.errors

from channel_server import cli_common as cc
from channel_server.errors import ChannelError, ClientError, TransportError
from channel_server.wire import check_name
from publisher.client import Publisher

log = logging.getLogger("publisher")
DEFAULT_BATCH = 100
DEFAULT_PAYLOAD = 100
DEFAULT_PARTITIONS = 1


def build_parser() -> argparse.ArgumentParser:
    parser = cc.Parser(
        prog="python -m publisher", description="Publish events to an event channel."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pub = sub.add_parser(
        "publish",
        help="publish N synthetic events",
        description="Publish N synthetic events with ids PUB-<seq> (seq from 1) and "
        "partition seq %% P. Prints accepted / duplicate / refused counts and the rate.",
    )
    cc.add_ns_flags(pub)
    pub.add_argument("--channel", required=True, help="channel name")
    pub.add_argument("--id", required=True, dest="publisher_id", help="publisher id (PUB)")
    pub.add_argument("--count", type=cc.positive_int, required=True, help="events to publish")
    pub.add_argument(
        "--partitions",
        type=cc.positive_int,
        default=DEFAULT_PARTITIONS,
        help="partition of event seq is seq %% P (default %(default)s)",
    )
    pub.add_argument(
        "--payload-size",
        type=cc.non_negative_int,
        default=DEFAULT_PAYLOAD,
        help="payload bytes per event (default %(default)s)",
    )
    pub.add_argument(
        "--batch-size",
        type=cc.positive_int,
        default=DEFAULT_BATCH,
        help="events per publish call (default %(default)s)",
    )
    pub.add_argument(
        "--start-seq",
        type=cc.positive_int,
        default=1,
        help="first sequence number (default %(default)s)",
    )
    pub.add_argument(
        "--create", action="store_true", help="create the channel if nobody hosts it yet"
    )
    pub.add_argument(
        "--wait-when-full",
        action="store_true",
        help="on QueueFull wait for the channel's retry hint and publish the rest again",
    )
    pub.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    return parser


def synthetic_events(
    publisher: Publisher, count: int, partitions: int, payload_size: int
) -> Iterator[dict[str, Any]]:
    payload = "x" * payload_size
    for _ in range(count):
        yield publisher.event(payload, partition=publisher.next_seq % partitions)


def publish(args: argparse.Namespace) -> int:
    check_name("channel", args.channel)
    check_name("id", args.publisher_id)
    with Publisher(
        args.channel,
        args.publisher_id,
        ns_host=args.ns_host,
        ns_port=args.ns_port,
        create=args.create,
        next_seq=args.start_seq,
    ) as publisher:
        started = time.perf_counter()
        events = synthetic_events(publisher, args.count, args.partitions, args.payload_size)
        totals = publisher.publish_all(events, args.batch_size, args.wait_when_full)
        elapsed = time.perf_counter() - started
    figures = {
        "channel": args.channel,
        "published": args.count,
        "accepted": totals.accepted,
        "duplicates": totals.duplicates,
        "refused": totals.refused,
        "unrouted": totals.unrouted,
        "seconds": round(elapsed, 4),
        "events_per_s": round(args.count / elapsed, 1) if elapsed > 0 else None,
    }
    print(
        f"{args.publisher_id} -> {args.channel}: {totals.accepted} accepted, "
        f"{totals.duplicates} duplicate, {totals.refused} refused (QueueFull), "
        f"{totals.unrouted} unrouted in {elapsed:.3f} s ({figures['events_per_s']} events/s)"
    )
    if args.json:
        print(json.dumps(figures))
    return cc.EXIT_REFUSED if totals.refused else cc.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cc.setup_logging(args.log_level)
    try:
        return publish(args)
    except ClientError as exc:
        return cc.fail(str(exc), cc.EXIT_USAGE)
    except (TransportError, Pyro5.errors.CommunicationError) as exc:
        return cc.fail(f"broker unavailable: {exc}", cc.EXIT_UNAVAILABLE)
    except ChannelError as exc:
        return cc.fail(str(exc))


if __name__ == "__main__":
    sys.exit(main())
