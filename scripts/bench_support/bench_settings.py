"""bench.py's settings and their flags (bench_scale.py and bench_metrics.py use them too)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from bench_support.report import add_store_flag, positive
from bench_support.service import BROKER_CPU_ARGS


@dataclass
class Settings:
    python: str
    runs: int
    subscribers: int
    partitions: int
    payload_size: int
    events: int
    batch_size: int
    batch1_events: int
    latency_rate: float
    latency_seconds: float
    latency_tick_ms: float
    raw_events: int
    raw_batch_size: int
    memory_events: int
    memory_batch_size: int
    prefetch: int | None
    log_level: str
    store: str
    broker_args: list[str]
    workdir: Path = field(default_factory=Path)
    warmup_events: int | None = None
    """Events published (and acknowledged) before a throughput run; None: 4 per partition."""
    submit: bool = False
    """Publish through ``Publisher.submit`` (its sender thread batches what queues up)
    instead of ``publish``."""
    separate_cpus: bool = False
    """The broker on CPU 0 and the bench subscribers on the other CPUs (see
    :func:`bench_support.service.subscriber_cpus`): each side on CPUs of its own, as on
    machines of their own. By default the OS places the subscribers, and it wakes many of
    them on the broker's CPU."""
    open_partitions: bool = False
    """The warm-up publishes under the run's publisher id, so the run's partitions (one per
    publisher and partition) are open and owned when it starts: the run then measures
    partitions in use. By default the warm-up has a publisher of its own and the run
    opens every one of its partitions: at 100,000 partitions and 100,000 events, each
    event opens one (it is assigned and its owner row written)."""


def add_bench_flags(parser: argparse.ArgumentParser) -> None:
    """The workload of each measurement, the store and the broker's extra flags."""
    parser.add_argument("--subscribers", type=positive, default=4, help="default 4")
    parser.add_argument("--partitions", type=positive, default=16, help="default 16")
    parser.add_argument("--payload-size", type=int, default=100, help="bytes (default 100)")
    parser.add_argument("--prefetch", type=positive, default=None, help="subscriber prefetch")
    parser.add_argument(
        "--events", type=positive, default=100_000, help="throughput events (default 100000)"
    )
    parser.add_argument("--batch-size", type=positive, default=100, help="default 100")
    parser.add_argument(
        "--batch1-events", type=positive, default=5_000, help="batch-1 events (default 5000)"
    )
    parser.add_argument(
        "--latency-rate", type=float, default=1_000.0, help="offered events/s (default 1000)"
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=5.0, help="paced publishing time (default 5)"
    )
    parser.add_argument(
        "--latency-tick-ms", type=float, default=10.0, help="publish every N ms (default 10)"
    )
    parser.add_argument(
        "--raw-events", type=positive, default=200_000, help="raw Pyro5 events (default 200000)"
    )
    parser.add_argument("--raw-batch-size", type=positive, default=100, help="default 100")
    parser.add_argument(
        "--memory-events",
        type=positive,
        default=1_000_000,
        help="events queued for the memory measurement (default 1000000)",
    )
    parser.add_argument("--memory-batch-size", type=positive, default=1_000, help="default 1000")
    add_store_flag(parser)
    parser.add_argument(
        "--broker-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for 'channel_server serve' (repeatable), e.g. --broker-arg=--memory",
    )
    parser.add_argument(
        "--submit",
        action="store_true",
        help="publish through Publisher.submit (a sender thread sends what queued up "
        "during a round trip as one batch) instead of publish",
    )
    parser.add_argument(
        "--open-partitions",
        action="store_true",
        help="the warm-up opens the run's own partitions (it publishes as the run's "
        "publisher), so a throughput run measures partitions in use, not their opening",
    )
    parser.add_argument(
        "--separate-cpus",
        action="store_true",
        help="the broker on CPU 0 (--cpu 0) and the bench subscribers on the other CPUs "
        "(taskset), as on machines of their own; by default the OS places the "
        "subscribers, and wakes many of them on the broker's CPU",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="every process on mutual TLS (a throwaway CA made with trustme)",
    )


def settings_from_args(args: argparse.Namespace, workdir: Path) -> Settings:
    """The settings of a parsed command line (``build_parser``); logs go to ``workdir``."""
    return Settings(
        python=args.python,
        runs=args.runs,
        subscribers=args.subscribers,
        partitions=args.partitions,
        payload_size=args.payload_size,
        events=args.events,
        batch_size=args.batch_size,
        batch1_events=args.batch1_events,
        latency_rate=args.latency_rate,
        latency_seconds=args.latency_seconds,
        latency_tick_ms=args.latency_tick_ms,
        raw_events=args.raw_events,
        raw_batch_size=args.raw_batch_size,
        memory_events=args.memory_events,
        memory_batch_size=args.memory_batch_size,
        prefetch=args.prefetch,
        log_level=args.log_level,
        store=args.store,
        broker_args=[*args.broker_arg, *(BROKER_CPU_ARGS if args.separate_cpus else ())],
        workdir=workdir,
        open_partitions=args.open_partitions,
        submit=args.submit,
        separate_cpus=args.separate_cpus,
    )
