#!/usr/bin/env python
"""Benchmark the durable store (the backup queue, SQLite in WAL mode) against the
in-memory one, and a broker's restart with a large backlog (issue 4), with real processes
on 127.0.0.1.

Measurements (pick with ``--only``; each is repeated ``--runs`` times, fresh processes
every run):

  durable  the throughput workload of bench.py (broker + 4 bench subscribers; 100,000
           events of 100 B in batches of 100 over 16 partitions; events/s from the first
           publish to the last ack), run by bench.py's own code once with the SQLite store
           (``--data-dir``, a fresh one) and once with ``--memory``, back to back (the
           order alternates between runs). Figure: SQLite events/s as a % of memory's
  restart  a broker with a data dir and no subscriber; 1,000,000 events of 100 B
           published in batches of 1,000 (capacity above that); SIGKILL; the same command
           started again on that data dir. Figure: seconds from that spawn until the
           channel answers stats() with unacked == 1,000,000 ("serving again"); also the
           size of channels.sqlite + channels.sqlite-wal per event, after the kill. The
           backlog is published once; every run restarts on a fresh copy of the crashed
           data dir (copied before the spawn, not timed); --republish publishes per run

Run it with the project's venv:  .venv/bin/python scripts/bench_store.py  (see --help).
Every child process is stopped at the end, also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench
from bench_support.procs import ROOT, BenchError, Proc, ProcGroup, load_average, read_rss_kib
from bench_support.report import Target, bench_main, make_parser, positive
from bench_support.service import (
    CHANNEL,
    EventMaker,
    channel_proxy,
    publish_count,
    start_broker,
)

sys.path.insert(0, str(ROOT))  # measure the checkout this script is in, whatever is installed
MEASUREMENTS = ("durable", "restart")
DB_FILES = ("channels.sqlite", "channels.sqlite-wal")
SERVING_TIMEOUT_S = 300.0
POLL_S = 0.02
MIB = 1024 * 1024


@dataclass
class StoreSettings:
    python: str
    runs: int
    log_level: str
    throughput_args: list[str]
    """bench.py flags of the durable measurement's workload."""
    throughput_description: str
    restart_events: int
    restart_batch_size: int
    payload_size: int
    partitions: int
    republish: bool
    workdir: Path = field(default_factory=Path)
    backlog: Backlog | None = None
    """The restart measurement's crashed data dir, once published."""


# -- durable vs in-memory ----------------------------------------------------------------
def measure_durable(ss: StoreSettings, run: int) -> dict[str, Any]:
    """bench.py's throughput measurement with each store, back to back."""
    load = load_average()
    order = ("sqlite", "memory") if run % 2 else ("memory", "sqlite")
    outcome: dict[str, dict[str, Any]] = {}
    for store in order:
        argv = [*ss.throughput_args, "--store", store]
        settings = bench.settings_from_args(bench.build_parser().parse_args(argv), ss.workdir)
        settings.workdir = ss.workdir / f"durable-{store}"
        outcome[store] = bench.measure_throughput(settings, run)
    sqlite, memory = outcome["sqlite"], outcome["memory"]
    return {
        "sqlite_events_per_s": sqlite["events_per_s"],
        "memory_events_per_s": memory["events_per_s"],
        "ratio_pct": round(100 * sqlite["events_per_s"] / memory["events_per_s"], 1),
        "sqlite_p99_ms": sqlite["p99_ms"],
        "memory_p99_ms": memory["p99_ms"],
        "sqlite_cpu_broker_s": sqlite["cpu_broker_s"],
        "memory_cpu_broker_s": memory["cpu_broker_s"],
        "first": order[0],
        "load1": load,
    }


# -- restart with a backlog --------------------------------------------------------------
def wait_serving(broker: Proc, ns_port: int, expected: int) -> tuple[float, dict[str, Any]]:
    """Ask the channel for stats() until it answers; returns the time.monotonic() of the
    answer and the stats. Refused connections, a name server not up yet and timeouts
    (the daemon serves only once every channel is restored) are retried."""
    import Pyro5.errors

    from channel_server.errors import ChannelError

    deadline = time.monotonic() + SERVING_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if broker.popen.poll() is not None:
            code = broker.popen.returncode
            raise BenchError(f"restarted broker exited with {code}:\n{broker.tail()}")
        try:
            with channel_proxy(ns_port, timeout_s=2.0) as channel:
                stats = channel.stats()
            answered = time.monotonic()
        except (Pyro5.errors.PyroError, ChannelError) as exc:
            last = exc
            time.sleep(POLL_S)
            continue
        if stats["unacked"] != expected:
            raise BenchError(f"restarted channel holds {stats['unacked']} of {expected} events")
        return answered, stats
    raise BenchError(f"channel not serving {SERVING_TIMEOUT_S:g} s after the restart: {last}")


@dataclass
class Backlog:
    """A data dir left by a broker SIGKILLed with ``events`` unacknowledged events."""

    data_dir: Path
    events: int
    sizes: dict[str, int]
    publish_events_per_s: float


def make_backlog(ss: StoreSettings, run: int) -> Backlog:
    """Start a broker with a fresh data dir and no subscriber, publish the backlog, check
    that the channel holds all of it, SIGKILL the broker. The data dir is kept."""
    from publisher.client import Publisher

    count = ss.restart_events
    with ProcGroup(ss.workdir / f"backlog-{run}") as procs:
        data_dir = procs.workdir / "data"
        broker, ns_port = start_broker(
            procs,
            ss.python,
            ["--data-dir", str(data_dir)],
            capacity=count + 1000,
            log_level=ss.log_level,
        )
        with Publisher(CHANNEL, "bench", ns_port=ns_port, state_dir=None) as publisher:
            maker = EventMaker(f"backlog{run}", ss.partitions, ss.payload_size)
            t0 = time.perf_counter()
            publish_count(publisher, maker, count, ss.restart_batch_size)
            publish_s = time.perf_counter() - t0
        with channel_proxy(ns_port) as channel:
            if (unacked := channel.stats()["unacked"]) != count:
                raise BenchError(f"{unacked} events unacknowledged before the kill, not {count}")
        broker.popen.send_signal(signal.SIGKILL)
        broker.popen.wait(10.0)
    return Backlog(
        data_dir,
        count,
        {name: _size(data_dir / name) for name in DB_FILES},
        round(count / publish_s, 1),
    )


def measure_restart(ss: StoreSettings, run: int) -> dict[str, Any]:
    """Restart a broker on a copy of the backlog's data dir (the backlog is published in
    the first run, or in every run with ``--republish``) and time it until it serves."""
    load = load_average()
    if ss.backlog is None or ss.republish:
        drop_backlog(ss)
        ss.backlog = make_backlog(ss, run)
    backlog = ss.backlog
    with ProcGroup(ss.workdir / f"restart-{run}") as procs:
        data_dir = procs.workdir / "data"
        procs.scratch.append(data_dir)
        shutil.copytree(backlog.data_dir, data_dir)
        spawned = time.monotonic()
        broker, ns_port = start_broker(
            procs,
            ss.python,
            ["--data-dir", str(data_dir)],
            capacity=backlog.events + 1000,
            log_level=ss.log_level,
            wait=False,
        )
        serving, stats = wait_serving(broker, ns_port, backlog.events)
        rss = read_rss_kib(broker.pid)
    return {
        "events": backlog.events,
        "serving_s": round(serving - spawned, 3),
        "ready_line_s": round(broker.ready_at - spawned, 3) if broker.ready_at else None,
        "bytes_per_event": round(sum(backlog.sizes.values()) / backlog.events, 1),
        "db_mib": round(backlog.sizes[DB_FILES[0]] / MIB, 1),
        "wal_mib": round(backlog.sizes[DB_FILES[1]] / MIB, 1),
        "publish_events_per_s": backlog.publish_events_per_s,
        "restored_rss_mib": round(rss["VmRSS"] / 1024, 1),
        "stored": stats["stored"],
        "load1": load,
    }


def drop_backlog(ss: StoreSettings) -> None:
    if ss.backlog is not None:
        shutil.rmtree(ss.backlog.data_dir, ignore_errors=True)
        ss.backlog = None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


SHOWN: dict[str, list[tuple[str, str, str]]] = {
    "durable": [
        ("sqlite_events_per_s", "events/s, SQLite store (--data-dir)", ",.0f"),
        ("memory_events_per_s", "events/s, memory store (--memory)", ",.0f"),
        ("ratio_pct", "SQLite / memory (%)", ".1f"),
        ("sqlite_p99_ms", "latency p99 (ms), SQLite", ".1f"),
        ("memory_p99_ms", "latency p99 (ms), memory", ".1f"),
        ("sqlite_cpu_broker_s", "broker CPU s, SQLite", ".2f"),
        ("memory_cpu_broker_s", "broker CPU s, memory", ".2f"),
    ],
    "restart": [
        ("serving_s", "s, spawn → stats() answers with every event", ".2f"),
        ("ready_line_s", "s, spawn → 'ready at' line", ".2f"),
        ("bytes_per_event", "bytes on disk per event (db + WAL)", ",.0f"),
        ("db_mib", "channels.sqlite (MiB)", ",.0f"),
        ("wal_mib", "channels.sqlite-wal (MiB)", ",.0f"),
        ("restored_rss_mib", "restarted broker RSS (MiB)", ",.0f"),
        ("publish_events_per_s", "events/s publishing the backlog", ",.0f"),
    ],
}
TARGETS = {
    ("durable", "ratio_pct"): Target("ratio_pct", ">=", 70),
    ("restart", "serving_s"): Target("serving_s", "<=", 10),
}


def describe(name: str, ss: StoreSettings) -> str:
    if name == "durable":
        return ss.throughput_description
    return (
        f"{ss.restart_events:,} x {ss.payload_size} B unacknowledged (batches of "
        f"{ss.restart_batch_size:,}), SIGKILL, restart"
    )


MEASURE: dict[str, Callable[[StoreSettings, int], dict[str, Any]]] = {
    "durable": measure_durable,
    "restart": measure_restart,
}


# -- command line ------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "scripts/bench_store.py",
        __doc__,
        "Targets (issue 4): SQLite throughput ≥ 70 % of the memory store's; serving "
        "again ≤ 10 s after a restart with 1,000,000 unacknowledged events.",
        MEASUREMENTS,
    )
    dur = parser.add_argument_group("durable (passed to bench.py's throughput measurement)")
    dur.add_argument("--events", type=positive, default=100_000, help="default 100000")
    dur.add_argument("--batch-size", type=positive, default=100, help="default 100")
    dur.add_argument("--partitions", type=positive, default=16, help="default 16")
    dur.add_argument("--subscribers", type=positive, default=4, help="default 4")
    dur.add_argument("--prefetch", type=positive, default=None, help="subscriber prefetch")
    parser.add_argument("--payload-size", type=int, default=100, help="bytes (default 100)")
    res = parser.add_argument_group("restart")
    res.add_argument(
        "--restart-events", type=positive, default=1_000_000, help="backlog (default 1000000)"
    )
    res.add_argument("--restart-batch-size", type=positive, default=1_000, help="default 1000")
    res.add_argument(
        "--republish",
        action="store_true",
        help="publish the backlog again for every run (default: publish it once, SIGKILL, "
        "and restart each run from a copy of that data dir)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return bench_main(
        args,
        prog="bench_store",
        build=lambda workdir: settings_from_args(args, workdir),
        measure=MEASURE,
        describe=describe,
        shown=SHOWN,
        targets=TARGETS,
        title=f"Store benchmark: {args.runs} run(s) each, median first",
        hidden=("backlog",),
        cleanup=drop_backlog,  # hundreds of MiB, even when the logs are kept
    )


def settings_from_args(args: argparse.Namespace, workdir: Path) -> StoreSettings:
    throughput_args = [
        "--events", str(args.events),
        "--batch-size", str(args.batch_size),
        "--partitions", str(args.partitions),
        "--subscribers", str(args.subscribers),
        "--payload-size", str(args.payload_size),
        "--log-level", args.log_level,
        "--python", args.python,
    ]  # fmt: skip
    if args.prefetch is not None:
        throughput_args += ["--prefetch", str(args.prefetch)]
    return StoreSettings(
        python=args.python,
        runs=args.runs,
        log_level=args.log_level,
        throughput_args=throughput_args,
        throughput_description=(
            f"bench.py throughput: {args.events:,} x {args.payload_size} B, batch "
            f"{args.batch_size}, {args.partitions} partitions, {args.subscribers} subscribers"
        ),
        restart_events=args.restart_events,
        restart_batch_size=args.restart_batch_size,
        payload_size=args.payload_size,
        partitions=args.partitions,
        republish=args.republish,
        workdir=workdir,
    )


if __name__ == "__main__":
    sys.exit(main())
