"""``python -m subscriber``: run a push subscriber."""

from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path
from typing import Any

import Pyro5.errors

from channel_server import cli_common as cc
from channel_server.errors import ChannelError, ClientError, TransportError
from channel_server.wire import DEFAULT_GROUP, check_name
from subscriber.client import Subscriber
from subscriber.faults import Faults, FaultSpec, parse_fault
from subscriber.processed import DEFAULT_WINDOW, ProcessedIds
from subscriber.record import Recorder

log = logging.getLogger("subscriber")
STOP_POLL_S = 1.0


def build_parser() -> argparse.ArgumentParser:
    parser = cc.Parser(prog="python -m subscriber", description="Subscribe to an event channel.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run a push subscriber until stopped",
        description="Run a push subscriber until SIGTERM or Ctrl-C, which finishes the "
        "event in hand, acknowledges what was processed and unsubscribes.",
    )
    cc.add_ns_flags(run)
    run.add_argument("--channel", required=True, help="channel name")
    run.add_argument("--id", required=True, dest="subscriber_id", help="subscriber id")
    run.add_argument("--group", default=DEFAULT_GROUP, help="consumer group (default %(default)s)")
    run.add_argument(
        "--prefetch",
        type=cc.positive_int,
        default=None,
        help="most unacknowledged events held at once (default: the channel's, 100)",
    )
    run.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="FILE",
        help="append one JSON line per processed event, flushed before the ack",
    )
    run.add_argument("--host", default="127.0.0.1", help="callback bind address")
    run.add_argument("--quiet", action="store_true", help="do not print a line per processed event")
    run.add_argument(
        "--fault",
        action="append",
        default=[],
        type=_fault_arg,
        metavar="SPEC",
        help="inject a fault (repeatable): delay:P:SECONDS, long-delay:P:SECONDS, "
        "crash-after:N, drop-acks:P, fail-on:ID",
    )
    run.add_argument(
        "--fault-seed", type=int, default=None, help="seed of the faults' random draws"
    )
    run.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the processed-ID window on disk here, so a restarted subscriber still "
        "acknowledges redelivered events without running the handler again",
    )
    run.add_argument(
        "--window",
        type=cc.positive_int,
        default=DEFAULT_WINDOW,
        help="processed ids remembered for effectively-once processing (default %(default)s)",
    )
    return parser


def _fault_arg(text: str) -> FaultSpec:
    try:
        return parse_fault(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _window_file(args: argparse.Namespace) -> Path | None:
    if args.state_dir is None:
        return None
    return args.state_dir / f"processed-{args.channel}-{args.group}-{args.subscriber_id}.txt"


def make_handler(subscriber_id: str, quiet: bool) -> Any:
    def handle(event: dict[str, Any]) -> None:
        if not quiet:
            print(
                f"[{subscriber_id}] {event['id']} partition={event['partition']} "
                f"attempt={event['attempt']}",
                flush=True,
            )

    return handle


def run(args: argparse.Namespace) -> int:
    check_name("channel", args.channel)
    check_name("id", args.subscriber_id)
    recorder = Recorder(args.record, args.subscriber_id) if args.record else None
    subscriber = Subscriber(
        args.channel,
        args.subscriber_id,
        make_handler(args.subscriber_id, args.quiet),
        group=args.group,
        prefetch=args.prefetch,
        ns_host=args.ns_host,
        ns_port=args.ns_port,
        host=args.host,
        recorder=recorder,
        faults=Faults(args.fault, random.Random(args.fault_seed)),
        processed=ProcessedIds(args.window, _window_file(args)),
    )
    stop = cc.stop_on_signals()
    try:
        info = subscriber.start()
    except BaseException:
        subscriber.stop(unsubscribe=False)
        raise
    print(
        f"subscriber {args.subscriber_id} ready on channel {args.channel} "
        f"(group {info['group']}, prefetch {info['prefetch']}) at {subscriber.uri}",
        flush=True,
    )
    try:
        while not stop.wait(STOP_POLL_S):
            pass
    finally:
        log.info("stopping subscriber %s after %d events", args.subscriber_id, subscriber.processed)
        subscriber.stop()
    return cc.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cc.setup_logging(args.log_level)
    try:
        return run(args)
    except ClientError as exc:
        return cc.fail(str(exc), cc.EXIT_USAGE)
    except (TransportError, Pyro5.errors.CommunicationError) as exc:
        return cc.fail(f"broker unavailable: {exc}", cc.EXIT_UNAVAILABLE)
    except ChannelError as exc:
        return cc.fail(str(exc))


if __name__ == "__main__":
    sys.exit(main())
