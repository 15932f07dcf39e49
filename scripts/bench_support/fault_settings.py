"""The fault benchmarks' settings and their flags (scripts/bench_faults.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from bench_support.report import add_store_flag, positive

DEFAULT_ACK_TIMEOUT_S = 5.0
"""The broker's default ``--ack-timeout`` (ChannelConfig.ack_timeout_s)."""


@dataclass
class FaultSettings:
    python: str
    runs: int
    store: str
    log_level: str
    ack_timeout_s: float | None
    max_attempts: int | None
    # recovery
    partitions: int
    rate: float
    tick_ms: float
    prefetch: int
    settle_s: float
    after_s: float
    # degraded throughput
    subscribers: int
    events: int
    batch_size: int
    degraded_partitions: int
    payload_size: int
    crash_after: int
    degraded_prefetch: int | None
    workdir: Path = field(default_factory=Path)

    @property
    def broker_args(self) -> list[str]:
        args = []
        if self.ack_timeout_s is not None:
            args += ["--ack-timeout", str(self.ack_timeout_s)]
        if self.max_attempts is not None:
            args += ["--max-attempts", str(self.max_attempts)]
        return args

    @property
    def ack_timeout(self) -> float:
        return DEFAULT_ACK_TIMEOUT_S if self.ack_timeout_s is None else self.ack_timeout_s


def add_fault_flags(parser: argparse.ArgumentParser) -> None:
    """The store, the broker's fault settings and each measurement's own."""
    add_store_flag(parser)
    parser.add_argument(
        "--ack-timeout",
        type=float,
        default=None,
        help="broker --ack-timeout in s (default: the broker's own, 5)",
    )
    parser.add_argument(
        "--max-attempts",
        type=positive,
        default=None,
        help="broker --max-attempts (default: the broker's own, 3)",
    )
    rec = parser.add_argument_group("recovery")
    rec.add_argument("--partitions", type=positive, default=8, help="default 8")
    rec.add_argument("--rate", type=float, default=200.0, help="events/s streamed (default 200)")
    rec.add_argument("--tick-ms", type=float, default=10.0, help="publish every N ms (default 10)")
    rec.add_argument("--prefetch", type=positive, default=1, help="subscriber prefetch (default 1)")
    rec.add_argument(
        "--settle", type=float, default=1.0, help="s of streaming before the signal (default 1)"
    )
    rec.add_argument(
        "--after",
        type=float,
        default=1.0,
        help="s of streaming after the partitions moved (default 1)",
    )
    deg = parser.add_argument_group("degraded throughput")
    deg.add_argument("--subscribers", type=positive, default=4, help="default 4")
    deg.add_argument("--events", type=positive, default=100_000, help="default 100000")
    deg.add_argument("--batch-size", type=positive, default=100, help="default 100")
    deg.add_argument(
        "--degraded-partitions", type=positive, default=16, help="partitions (default 16)"
    )
    deg.add_argument("--payload-size", type=int, default=100, help="bytes (default 100)")
    deg.add_argument(
        "--crash-after",
        type=positive,
        default=500,
        help="the crash-looping subscriber exits when its K-th event arrives (default 500)",
    )
    deg.add_argument(
        "--degraded-prefetch",
        type=positive,
        default=None,
        help="subscriber prefetch (default: the channel's, 100)",
    )


def settings_from_args(args: argparse.Namespace, workdir: Path) -> FaultSettings:
    return FaultSettings(
        python=args.python,
        runs=args.runs,
        store=args.store,
        log_level=args.log_level,
        ack_timeout_s=args.ack_timeout,
        max_attempts=args.max_attempts,
        partitions=args.partitions,
        rate=args.rate,
        tick_ms=args.tick_ms,
        prefetch=args.prefetch,
        settle_s=args.settle,
        after_s=args.after,
        subscribers=args.subscribers,
        events=args.events,
        batch_size=args.batch_size,
        degraded_partitions=args.degraded_partitions,
        payload_size=args.payload_size,
        crash_after=args.crash_after,
        degraded_prefetch=args.degraded_prefetch,
        workdir=workdir,
    )
