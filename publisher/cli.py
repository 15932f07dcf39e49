"""``python -m publisher``: publish events, put messages, run scenario files."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from channel_client import cli_common as cc
from channel_client.lookup import broker_of_channel, resolve_channel
from channel_client.remote import ClientOptions
from channel_client.scenario import ScenarioRunner, Step, load_steps
from channel_client.statefile import default_state_dir
from channel_server.errors import ChannelError
from channel_server.wire import make_proxy
from publisher.batch_file import FileReport, SparkMode, publish_file
from publisher.client import Publisher, PublishTotals
from publisher.flags import build_parser, check_publish_flags
from publisher.state import PublisherState
from publisher.topics import Putter
from spark_partitions.config import PlanError

log = logging.getLogger("publisher")


def _putter(args: argparse.Namespace) -> Putter:
    state = PublisherState(args.state_dir or default_state_dir(), args.publisher_id)
    return Putter(args.publisher_id, state, ClientOptions.from_args(args))


def put(args: argparse.Namespace) -> int:
    putter = _putter(args)
    try:
        if line := putter.resend_pending():
            print(f"resent an interrupted put: {line}")
        print(putter.put(args.topic, args.message))
    finally:
        putter.close()
    return cc.EXIT_OK


def run_script(args: argparse.Namespace) -> int:
    try:
        steps = load_steps(args.file, ("put",), "put")
    except ValueError as exc:
        return cc.fail(str(exc), cc.EXIT_USAGE)
    putter = _putter(args)
    stop = cc.stop_on_signals()
    runner = ScenarioRunner(args.file, steps, putter.state.file, stop, args.restart)

    def execute(step: Step, n: int) -> None:
        key = f"{runner.key}#{step.number}.{n}"
        print(putter.put(step.topic, step.text(n), key), flush=True)

    try:
        ran = runner.run(execute)
    finally:
        putter.close()
    print(runner.summary(ran))
    return cc.EXIT_OK


def synthetic_events(
    publisher: Publisher, count: int, partitions: int, payload_size: int
) -> Iterator[dict[str, Any]]:
    payload = "x" * payload_size
    for _ in range(count):
        yield publisher.event(payload, partition=publisher.next_seq % partitions)


def paced(
    events: Iterator[dict[str, Any]], rate: float, stop: threading.Event
) -> Iterator[dict[str, Any]]:
    """Yield events no faster than ``rate`` per second (a steady stream for tests)."""
    started = time.monotonic()
    for n, event in enumerate(events):
        ahead = started + n / rate - time.monotonic()
        if ahead > 0 and stop.wait(ahead):  # pacing is the behaviour asked for
            return
        yield event


def _summary(args: argparse.Namespace, totals: PublishTotals, elapsed: float) -> str:
    """A run's one line: what the channel did with what was sent, and how long it took."""
    return (
        f"{args.publisher_id} -> {args.channel}: {totals.accepted} accepted, "
        f"{totals.duplicates} duplicate, {totals.refused} refused (QueueFull), "
        f"{totals.unrouted} unrouted in {elapsed:.3f} s"
    )


def _say_done_before(args: argparse.Namespace, totals: PublishTotals, elapsed: float) -> None:
    """What a run stopped by an error had done: the error's line follows on stderr."""
    print(_summary(args, totals, elapsed) + " before an error stopped it")
    if args.json:
        done = {"accepted": totals.accepted, "duplicates": totals.duplicates}
        print(
            json.dumps({"channel": args.channel, **done, "refused": totals.refused, "error": True})
        )


def publish(args: argparse.Namespace) -> int:
    state_dir = args.state_dir or default_state_dir()
    with Publisher(
        args.channel,
        args.publisher_id,
        ns_host=args.ns_host,
        ns_port=args.ns_port,
        create=args.create,
        id_scope=args.id_scope,
        next_seq=args.start_seq,
        state=PublisherState(state_dir, args.publisher_id),
        retry_for_s=args.retry_for,
    ) as publisher:
        stop = cc.stop_on_signals()  # from here on, a signal stops after the batch in hand
        started = time.perf_counter()
        invalid = 0
        if args.file:
            report = _publish_file(args, publisher, stop)
            totals, invalid = report.totals, report.rejected
        else:
            events = synthetic_events(publisher, args.count, args.partitions, args.payload_size)
            if args.rate:
                events = paced(events, args.rate, stop)
            totals = PublishTotals()
            try:
                if args.submit:
                    publisher.submit_all(events, args.batch_size, stop, totals)
                else:
                    after_batch = _kill_queues_hook(args) if args.kill_queues_at else None
                    publisher.publish_all(
                        events, args.batch_size, args.wait_when_full, after_batch, stop, totals
                    )
            except ChannelError:
                _say_done_before(args, totals, time.perf_counter() - started)
                raise
        elapsed = time.perf_counter() - started
    count = totals.sent  # not what was asked for: a signal stops early, invalid rows stay
    figures = {
        "channel": args.channel,
        "published": count,
        "accepted": totals.accepted,
        "duplicates": totals.duplicates,
        "refused": totals.refused,
        "unrouted": totals.unrouted,
        "retries": publisher.retries,
        "seconds": round(elapsed, 4),
        "events_per_s": round(count / elapsed, 1) if elapsed > 0 else None,
    }
    figures["interrupted"] = totals.stopped
    figures["invalid"] = invalid
    print(
        _summary(args, totals, elapsed)
        + f" ({figures['events_per_s']} events/s)"
        + (" (interrupted: the rest was not sent)" if totals.stopped else "")
    )
    if args.json:
        print(json.dumps(figures))
    if totals.stopped:
        return cc.EXIT_INTERRUPTED
    if totals.refused:
        return cc.EXIT_REFUSED
    return cc.EXIT_PARTIAL if invalid else cc.EXIT_OK


def _publish_file(
    args: argparse.Namespace, publisher: Publisher, stop: threading.Event
) -> FileReport:
    slots = args.subscribers or _active_members(args)
    report = publish_file(
        publisher,
        args.file,
        SparkMode(args.spark),
        args.batch_size,
        slots,
        args.spark_threshold,
        progress=not args.no_progress,
        stop=stop,
        wait_when_full=args.wait_when_full,
        spark_master=args.master,
        driver_host=args.driver_host,
    )
    if report.planned:
        print(f"plan: {report.plan_summary}")
    if report.rejected:
        print(report.rejects_line())
        for example in report.reject_examples:
            print(f"  {example}")
    return report


def _active_members(args: argparse.Namespace) -> int:
    """Active members of the channel's groups (at least 1): the plan's default slots."""
    with make_proxy(resolve_channel(args.ns_host, args.ns_port, args.channel), 10) as channel:
        groups = channel.stats()["groups"].values()
    return max(1, max((sum(m["active"] for m in g["members"]) for g in groups), default=1))


def _kill_queues_hook(args: argparse.Namespace) -> Callable[[int], None]:
    """Called after each publish call; fires kill_queues after the N-th."""

    def after_batch(calls: int) -> None:
        if calls != args.kill_queues_at:
            return
        with make_proxy(broker_of_channel(args.ns_host, args.ns_port, args.channel), 10) as b:
            dropped = b.kill_queues(args.channel)
        log.warning("fault kill-queues-at:%d fired: %d queued events dropped", calls, dropped)

    return after_batch


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "publish" and (conflict := check_publish_flags(args)):
        parser.error(conflict)
    cc.setup(args)
    commands = {"publish": publish, "put": put, "script": run_script}
    return cc.run_client_command(commands[args.command], args, (PlanError,))


if __name__ == "__main__":
    sys.exit(main())
