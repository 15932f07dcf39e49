"""``python -m subscriber``: a push subscriber, the classic pull commands, scenario files."""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from pathlib import Path
from typing import Any

from channel_client import cli_common as cc
from channel_client.remote import ClientOptions
from channel_client.scenario import ScenarioRunner, load_steps
from channel_client.statefile import default_state_dir
from channel_server.errors import NotSubscribed
from subscriber.client import DEFAULT_CONNECT_TIMEOUT_S, Subscriber
from subscriber.faults import Faults, FaultSpec, parse_fault
from subscriber.processed import DEFAULT_WINDOW, ProcessedIds, window_path
from subscriber.pull import PullClient
from subscriber.record import Recorder

log = logging.getLogger("subscriber")
SCRIPT_ACTIONS = ("subscribe", "unsubscribe", "get", "topics")


def build_parser() -> argparse.ArgumentParser:
    parser = cc.Parser(prog="python -m subscriber", description="Subscribe to an event channel.")
    cc.add_version_flag(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run a push subscriber until stopped",
        description="Run a push subscriber until SIGTERM or Ctrl-C, which finishes the "
        "event in hand, acknowledges what was processed and unsubscribes.",
    )
    cc.add_channel_flags(run, "subscriber_id", "subscriber id")
    cc.add_group_flag(run)
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
    run.add_argument(
        "--port",
        type=cc.port_number,
        default=0,
        help="callback port, the one the broker pushes to (default 0: any free one; give "
        "one to let it through a firewall)",
    )
    run.add_argument(
        "--wait-for-channel",
        type=cc.non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for a channel that does not exist yet, which another process "
        "creates, before giving up with exit code 2 (default 0: at once)",
    )
    run.add_argument(
        "--keep-subscription",
        action="store_true",
        help="stop without unsubscribing: the membership stays, and a restart with the same "
        "--id goes on with it (for the only member of a group other than 'default', whose "
        "unsubscribe drops the group and its backlog: a rolling restart). Its events wait "
        "for it until it is declared dead (silent past the channel's --ack-timeout)",
    )
    cc.add_bind_flags(run, "host", users=False)
    run.add_argument("--quiet", action="store_true", help="do not print a line per processed event")
    run.add_argument(
        "--fault",
        action="append",
        default=[],
        type=_fault_arg,
        metavar="SPEC",
        help="inject a fault (repeatable): delay:P:SECONDS and long-delay:P:SECONDS (slow "
        "deliveries), slow:P:SECONDS (a long handler), crash-after:N, drop-acks:P, fail-on:ID, "
        "crash-on:ID (a hard exit whenever event ID reaches the handler), fail-first:P (a "
        "first delivery fails, its retry works)",
    )
    run.add_argument(
        "--fault-seed", type=int, default=None, help="seed of the faults' random draws"
    )
    cc.add_state_dir_flag(
        run,
        "keep the processed-ID window on disk here, so a restarted subscriber still "
        "acknowledges redelivered events without running the handler again (default: "
        "in memory only, whatever $PUBSUB_STATE_DIR says: two processes with one id must "
        "not share a window file by accident)",
    )
    run.add_argument(
        "--connect-timeout",
        type=cc.non_negative_float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help="wait this long for a broker that does not answer yet (default %(default)s)",
    )
    run.add_argument(
        "--window",
        type=cc.positive_int,
        default=DEFAULT_WINDOW,
        help="processed ids remembered for effectively-once processing (default %(default)s)",
    )
    _add_pull_commands(sub)
    return parser


def _add_pull_commands(sub: Any) -> None:
    helps = {
        "subscribe": "subscribe to a topic (created when new); idempotent",
        "unsubscribe": "leave a topic; its pending messages are dropped; idempotent",
        "get": "the next message of a topic, or say there is none yet / not subscribed",
    }
    for name, text in helps.items():
        description = text[0].upper() + text[1:] + "."
        cmd = cc.add_client_command(sub, name, text, description, "subscriber_id")
        cmd.add_argument("topic", type=cc.plain_name, help="topic name")
        cc.add_group_flag(cmd, "group (default: one of its own)")
    topics = cc.add_client_command(
        sub,
        "topics",
        "the topics a subscriber is subscribed to",
        "List the topics (channels) a subscriber id belongs to, asked of every broker.",
        "subscriber_id",
    )
    topics.add_argument("--json", action="store_true", help="print JSON")
    cc.add_script_command(sub, ", ".join(SCRIPT_ACTIONS), "subscriber_id")


def _pull_client(args: argparse.Namespace) -> PullClient:
    state_dir = args.state_dir or default_state_dir()
    return PullClient(args.subscriber_id, state_dir, ClientOptions.from_args(args))


def pull_action(
    client: PullClient, action: str, topic: str, group: str | None = None
) -> tuple[str, int]:
    """Run one classic action; returns the line to print and the exit code."""
    sid = client.subscriber_id
    if action == "subscribe":
        info = client.subscribe(topic, group)
        return f"{sid} subscribed to {topic} (group {info['group']}, pull)", cc.EXIT_OK
    if action == "unsubscribe":
        left = client.unsubscribe(topic, group)
        return (
            f"{sid} {'unsubscribed from' if left else 'was not subscribed to'} {topic}",
            cc.EXIT_OK,
        )
    if action == "topics":
        return _topics_line(sid, client.topics()), cc.EXIT_OK
    try:
        reply = client.get(topic, group)
    except NotSubscribed:
        return f"{sid} is not subscribed to {topic}: no message consumed", cc.EXIT_NOT_SUBSCRIBED
    if reply["status"] == "empty":
        return f"no messages yet on {topic}", cc.EXIT_OK
    event = reply["event"]
    return f"{event['id']}: {event['payload']}", cc.EXIT_OK


def _topics_line(sid: str, found: list[dict[str, Any]]) -> str:
    names = [f["channel"] for f in found if not f.get("unreachable")]
    away = [f["channel"] for f in found if f.get("unreachable")]
    line = f"{sid} is subscribed to: {', '.join(names) if names else '(nothing)'}"
    return line + (f" (brokers unreachable for: {', '.join(away)})" if away else "")


def pull(args: argparse.Namespace) -> int:
    client = _pull_client(args)
    try:
        if args.command == "topics" and args.json:
            print(json.dumps(client.topics()))
            return cc.EXIT_OK
        topic, group = getattr(args, "topic", ""), getattr(args, "group", None)
        line, code = pull_action(client, args.command, topic, group)
    finally:
        client.close()
    print(line)
    return code


def run_script(args: argparse.Namespace) -> int:
    try:
        steps = load_steps(args.file, SCRIPT_ACTIONS, None)
    except ValueError as exc:
        return cc.fail(str(exc), cc.EXIT_USAGE)
    client = _pull_client(args)
    stop = cc.stop_on_signals()
    runner = ScenarioRunner(args.file, steps, client.state, stop, args.restart)
    try:
        ran = runner.run(
            lambda step, n: print(pull_action(client, step.action, step.topic)[0], flush=True)
        )
    finally:
        client.close()
    print(runner.summary(ran))
    return cc.EXIT_OK


def _fault_arg(text: str) -> FaultSpec:
    try:
        return parse_fault(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _window_file(args: argparse.Namespace) -> Path | None:
    """The window's file in ``--state-dir`` (the names were checked when parsed;
    state_path checks them again before anything is written)."""
    if args.state_dir is None:
        return None
    return window_path(args.state_dir, args.channel, args.group, args.subscriber_id)


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
    processed = ProcessedIds(args.window, _window_file(args))  # a malformed one: refused
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
        port=args.port,
        wait_for_channel_s=args.wait_for_channel,
        recorder=recorder,
        faults=Faults(args.fault, random.Random(args.fault_seed)),
        processed=processed,
        connect_timeout_s=args.connect_timeout,
    )
    stop = cc.stop_on_signals()
    try:
        with cc.signals_to_main_thread():  # its threads leave the signals to this one
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
        failed = cc.serve_until_stopped(stop, subscriber.why_failed)
    finally:
        cc.exit_on_next_signal("events not acknowledged yet will be delivered again")
        log.info(
            "stopping subscriber %s after %d events: finishing the event in hand, then its "
            "acks and %s (Ctrl-C again to quit at once)",
            args.subscriber_id,
            subscriber.processed,
            "keeping its subscription" if args.keep_subscription else "unsubscribe",
        )
        subscriber.stop(unsubscribe=not args.keep_subscription)
    return cc.EXIT_OK if failed is None else cc.fail(failed, cc.EXIT_ERROR)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cc.setup(args)
    commands = {"run": run, "script": run_script}
    return cc.run_client_command(commands.get(args.command, pull), args)


if __name__ == "__main__":
    sys.exit(main())
