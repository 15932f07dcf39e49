"""The command line of ``python -m publisher``: its flags and which of them go together.

Apart from :mod:`publisher.cli` (the commands) so each stays short; the defaults live here.
"""

from __future__ import annotations

import argparse

from channel_client import cli_common as cc
from publisher.batch_file import DEFAULT_SPARK_THRESHOLD_ROWS, SparkMode
from publisher.client import DEFAULT_PARTITIONS, DEFAULT_RETRY_FOR_S

DEFAULT_BATCH = 100
DEFAULT_PAYLOAD = 100
FILE_ONLY: tuple[str, ...] = ("spark", "spark_threshold", "subscribers", "master", "driver_host")
"""Flags (dests) of ``publish --file`` alone: refused with ``--count``, not ignored."""
COUNT_ONLY: tuple[str, ...] = (
    "partitions",
    "payload_size",
    "start_seq",
    "rate",
    "kill_queues_at",
    "submit",
)
"""Flags (dests) of synthetic events alone: refused with ``--file``, not ignored."""


def build_parser() -> argparse.ArgumentParser:
    parser = cc.Parser(
        prog="python -m publisher", description="Publish events to an event channel."
    )
    cc.add_version_flag(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pub = sub.add_parser(
        "publish",
        help="publish N synthetic events",
        description="Publish N synthetic events with ids PUB-<seq> (seq from 1) and "
        "partition seq % P, or the rows of a batch file. Prints accepted / duplicate / "
        "refused counts and the rate. Exit codes: 0 all published; 4 some refused "
        "(QueueFull); 7 some rows of --file invalid and not published (their lines are "
        "named); 3 broker unavailable; 2 bad input; 130 interrupted.",
    )
    cc.add_channel_flags(pub, "publisher_id", "publisher id (PUB)")
    source = pub.add_mutually_exclusive_group(required=True)
    source.add_argument("--count", type=cc.positive_int, help="synthetic events to publish")
    source.add_argument(
        "--file",
        metavar="PATH",
        help="publish a batch file instead (JSON lines, CSV or Parquet; a directory of them)",
    )
    pub.add_argument(
        "--spark",
        choices=[m.value for m in SparkMode],
        default=None,
        help="with --file only: plan the batch with the spark_partitions job first (always), "
        "publish it as it is (never), or plan from --spark-threshold rows on (auto, default)",
    )
    pub.add_argument(
        "--spark-threshold",
        type=cc.positive_int,
        default=None,
        metavar="ROWS",
        help="with --file only: rows from which --spark auto plans with Spark "
        f"(default {DEFAULT_SPARK_THRESHOLD_ROWS})",
    )
    pub.add_argument(
        "--subscribers",
        type=cc.positive_int,
        default=None,
        help="with --file only: slots the plan balances blocks over (default: the "
        "channel's active members)",
    )
    pub.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="with --file only: the Spark master a plan runs on (default local[*]); "
        "spark://HOST:PORT for a standalone cluster, whose executors must reach the file "
        "and this machine's temp dir (same machine or a shared file system)",
    )
    pub.add_argument(
        "--driver-host",
        default=None,
        metavar="ADDR",
        help="with --file only: the address the Spark driver binds to and the executors "
        "call back (default 127.0.0.1; on a real cluster one they can reach)",
    )
    pub.add_argument(
        "--no-progress", action="store_true", help="no progress bar while publishing a file"
    )
    pub.add_argument(
        "--partitions",
        type=cc.positive_int,
        default=None,
        help="with --count only: partition of event seq is seq %% P, so the events spread "
        f"over P partitions, each in order (default {DEFAULT_PARTITIONS}, as the library)",
    )
    pub.add_argument(
        "--payload-size",
        type=cc.non_negative_int,
        default=None,
        help=f"with --count only: payload bytes per event (default {DEFAULT_PAYLOAD})",
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
        default=None,
        help="with --count only: first sequence number (default: the one after the last "
        "this publisher used on this channel, from its state file; 1 for a new one)",
    )
    cc.add_state_dir_flag(
        pub,
        "where the sequence file lives (default $PUBSUB_STATE_DIR or "
        "~/.local/state/pubsub-channels)",
    )
    pub.add_argument(
        "--retry-for",
        type=cc.non_negative_float,
        default=DEFAULT_RETRY_FOR_S,
        metavar="SECONDS",
        help="keep retrying a batch this long when the broker is unreachable; a batch "
        "that did arrive is reported duplicate, never stored twice (default %(default)s)",
    )
    pub.add_argument(
        "--rate",
        type=cc.positive_float,
        default=None,
        metavar="EVENTS_PER_S",
        help="with --count only: pace synthetic events at about this rate (default: as "
        "fast as possible)",
    )
    pub.add_argument(
        "--kill-queues-at",
        type=cc.positive_int,
        default=None,
        metavar="N",
        help="with --count only; fault injection: after the N-th publish call, ask the "
        "broker to empty the channel's in-memory queues (the broker needs "
        "--allow-fault-injection)",
    )
    pub.add_argument(
        "--create", action="store_true", help="create the channel if nobody hosts it yet"
    )
    cc.add_ids_flag(
        pub,
        None,
        "for a channel --create makes; an existing channel with the other scope is refused "
        "(default: what the channel has, or the broker's default for a new one)",
    )
    pub.add_argument(
        "--submit",
        action="store_const",
        const=True,
        default=None,
        help="with --count only: send the batches through Publisher.submit, so the next "
        "batches are made while earlier ones travel and what queues up goes as one call; "
        "a full channel is waited out (as --wait-when-full)",
    )
    pub.add_argument(
        "--wait-when-full",
        action="store_true",
        help="on QueueFull wait for the channel's retry hint and publish the rest again",
    )
    pub.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    put = cc.add_client_command(
        sub,
        "put",
        "classic put: one message to a topic, stored exactly once",
        "Put MESSAGE on TOPIC (created as a topic when new). A topic keeps a message only "
        "for its current subscribers; with none it says so and stores nothing.",
        "publisher_id",
    )
    put.add_argument("topic", type=cc.plain_name, help="topic name")
    put.add_argument("message", help="the message (a string payload)")
    cc.add_script_command(
        sub, "put: a topic and a message, '{n}' in it the repetition", "publisher_id"
    )
    return parser


def check_publish_flags(args: argparse.Namespace) -> str | None:
    """Why the flags of ``publish`` do not go together (a flag of the other source was
    given: it would be ignored), or None; then fills in the defaults of the flags left out
    (they default to None so that a given one can be told from a default)."""
    if args.file:
        other, mine, why = COUNT_ONLY, "--file", "a file's rows carry their own ids and partitions"
    else:
        other, mine, why = FILE_ONLY, "--count", "synthetic events are published as they are"
    for dest in other:
        if getattr(args, dest) is not None:
            flag = "--" + dest.replace("_", "-")
            return f"{flag} does not apply to {mine} ({why})"
    if args.submit and args.kill_queues_at is not None:
        return "--kill-queues-at does not apply to --submit (it counts publish calls)"
    defaults = {
        "spark": SparkMode.AUTO.value,
        "spark_threshold": DEFAULT_SPARK_THRESHOLD_ROWS,
        "partitions": DEFAULT_PARTITIONS,
        "payload_size": DEFAULT_PAYLOAD,
    }
    for dest, value in defaults.items():
        if getattr(args, dest) is None:
            setattr(args, dest, value)
    return None
