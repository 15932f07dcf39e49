#!/usr/bin/env python
"""Benchmark how the event channel service copes with failed subscribers (issue 3), with
real processes on 127.0.0.1.

Measurements (pick with ``--only``; each is repeated ``--runs`` times, fresh processes
every run):

  recovery-kill  a broker with its default settings (ack timeout 5 s, max attempts 3), two
                 bench subscribers (prefetch 1) and a publisher streaming R events/s over P
                 partitions. The subscriber owning the most partitions is killed with
                 SIGKILL. Figure: seconds from the SIGKILL to the first event of one of its
                 partitions processed by the other subscriber (both clocks are this
                 machine's time.time(); the partitions are read from the channel's stats()
                 just before the kill)
  recovery-stop  the same with the subscriber frozen by SIGSTOP instead: it still holds
                 its connections, so only the ack timeout catches it (it gets SIGCONT
                 before clean-up)
  degraded       4 subscribers, 100,000 events of 100 B in batches of 100 over 16
                 partitions (the workload of bench.py throughput): a healthy run, then a
                 run where one subscriber crash-loops (``python -m subscriber run --fault
                 crash-after:K``, restarted with the same id whenever it exits, until the
                 last ack). events/s of both and their ratio; every run checks that every
                 event was processed at least once and counts the duplicates

Run it with the project's venv:  .venv/bin/python scripts/bench_faults.py  (see --help).
Every child process is stopped at the end, also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from bench_support.fault_actors import CrashLooper, Streamer
from bench_support.fault_settings import (
    DEFAULT_ACK_TIMEOUT_S,
    FaultSettings,
    add_fault_flags,
    settings_from_args,
)
from bench_support.procs import (
    ROOT,
    BenchError,
    ProcGroup,
    load_average,
)
from bench_support.report import Target, bench_main, make_parser
from bench_support.service import (
    CHANNEL,
    EventMaker,
    channel_proxy,
    publish_count,
    read_summaries,
    start_bench_subscribers,
    start_run_broker,
    wait_acked,
    warm_up,
)

sys.path.insert(0, str(ROOT))  # measure the checkout this script is in, whatever is installed
MEASUREMENTS = ("recovery-kill", "recovery-stop", "degraded")
STREAM_PUBLISHER = "stream"
POLL_S = 0.01


# -- recovery ----------------------------------------------------------------------------
def stream_owners(stats: dict[str, Any]) -> dict[Any, str | None]:
    """partition -> owner, for the streaming publisher's partitions."""
    return {
        p["partition"]: p["owner"]
        for p in stats["groups"]["default"]["partitions"]
        if p["publisher_id"] == STREAM_PUBLISHER
    }


def wait_for(
    channel: Any, check: Callable[[dict[str, Any]], bool], timeout_s: float, what: str
) -> tuple[float, dict[str, Any]]:
    """Poll stats() until ``check`` holds; returns the time.time() it was seen, and them."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = channel.stats()
        if check(stats):
            return time.time(), stats
        if time.monotonic() > deadline:
            raise BenchError(f"{what} not seen after {timeout_s:g} s: {stream_owners(stats)}")
        time.sleep(POLL_S)


def measure_recovery(fs: FaultSettings, run: int, sig: signal.Signals) -> dict[str, Any]:
    label = "recovery-kill" if sig == signal.SIGKILL else "recovery-stop"
    tick_s = fs.tick_ms / 1000
    per_tick = max(1, round(fs.rate * tick_s))
    load = load_average()
    with ProcGroup(fs.workdir / f"{label}-{run}") as procs:
        _, ns_port = start_run_broker(procs, fs, capacity=1_000_000)
        subs = start_bench_subscribers(
            procs, fs.python, ns_port, ["s1", "s2"], fs.prefetch, ["--trace"]
        )
        by_id = {proc.name: (proc, out) for proc, out in subs}
        channel = channel_proxy(ns_port)
        maker = EventMaker(STREAM_PUBLISHER, fs.partitions, 100)
        with channel, Streamer(ns_port, maker, per_tick, tick_s) as stream:

            def everyone_busy(stats: dict[str, Any]) -> bool:
                owners = stream_owners(stats)
                return len(owners) == fs.partitions and set(owners.values()) == {"s1", "s2"}

            wait_for(channel, everyone_busy, 30.0, "both subscribers owning partitions")
            time.sleep(fs.settle_s)
            stream.check()
            owners = stream_owners(channel.stats())
            victim = max(("s1", "s2"), key=lambda s: (list(owners.values()).count(s), s == "s1"))
            survivor = "s2" if victim == "s1" else "s1"
            owned = {part for part, owner in owners.items() if owner == victim}
            victim_proc = by_id[victim][0]

            def moved(stats: dict[str, Any]) -> bool:
                owners = stream_owners(stats)
                return all(owners.get(part) == survivor for part in owned)

            t_signal = time.time()
            try:
                os.kill(victim_proc.pid, sig)
                limit = max(60.0, 4 * fs.ack_timeout * (fs.max_attempts or 3))
                t_moved, _ = wait_for(channel, moved, limit, f"{victim}'s partitions moved")
                time.sleep(fs.after_s)
                published = stream.stop()
                wait_acked(channel, published, 60.0)
            finally:
                if sig == signal.SIGSTOP:  # before anything else, clean-up included
                    os.kill(victim_proc.pid, signal.SIGCONT)
        procs.stop([by_id[survivor][0]])
        (summary,) = read_summaries([by_id[survivor]])
    taken = [
        (t, attempt)
        for t, publisher_id, part, _, attempt in summary["trace"]
        if publisher_id == STREAM_PUBLISHER and part in owned and t > t_signal
    ]
    if not taken:
        raise BenchError(f"{survivor} processed none of {victim}'s partitions after the signal")
    return {
        "signal": sig.name,
        "victim_partitions": len(owned),
        "recovery_s": round(min(t for t, _ in taken) - t_signal, 4),
        "reassigned_s": round(t_moved - t_signal, 4),
        "redelivered": sum(1 for _, attempt in taken if attempt > 1),
        "published": published,
        "offered_events_per_s": round(per_tick / tick_s, 1),
        "load1": load,
    }


# -- degraded throughput -----------------------------------------------------------------
def throughput_run(fs: FaultSettings, run: int, crash: bool) -> dict[str, Any]:
    """The bench.py throughput workload; with ``crash``, the last subscriber crash-loops.
    Returns events/s and the delivery check (missing ids, duplicate handler calls)."""
    from publisher.client import Publisher

    label = "crash" if crash else "healthy"
    count = fs.events
    bench_ids = [f"s{i}" for i in range(1, fs.subscribers + (0 if crash else 1))]
    with ProcGroup(fs.workdir / f"degraded-{label}-{run}") as procs:
        _, ns_port = start_run_broker(procs, fs, capacity=max(1_000_000, 2 * count))
        subs = start_bench_subscribers(
            procs, fs.python, ns_port, bench_ids, fs.degraded_prefetch, ["--keep-ids"]
        )
        looper = CrashLooper(procs, fs, ns_port, f"s{fs.subscribers}") if crash else None
        try:
            if looper is not None:
                looper.start()
            channel = channel_proxy(ns_port)
            with channel, Publisher(CHANNEL, "bench", ns_port=ns_port, state_dir=None) as publisher:
                size = max(fs.batch_size, 4 * fs.degraded_partitions)
                baseline = warm_up(
                    publisher, channel, fs.degraded_partitions, fs.payload_size, size
                )
                maker = EventMaker(f"{label}{run}", fs.degraded_partitions, fs.payload_size)
                t0 = time.time()
                publish_count(publisher, maker, count, fs.batch_size)
                t_acked = wait_acked(channel, baseline + count, max(120.0, count / 200))
        finally:
            if looper is not None:
                looper.stop()
        if looper is not None and looper.error:
            raise BenchError(looper.error)
        procs.stop([p for p, _ in subs])
        summaries = read_summaries(subs)
    expected = {f"{maker.publisher_id}-{seq}" for seq in range(1, count + 1)}
    seen: set[str] = set()
    ours: list[str] = []
    calls = 0
    for sm in summaries:
        seen.update(sm["ids"])
        calls += sm["count"]
    if looper is not None:
        ours = [r["id"] for r in looper.processed() if r["publisher_id"] == maker.publisher_id]
        seen.update(ours)
        calls += len(ours)
    return {
        "events_per_s": round(count / (t_acked - t0), 1),
        "missing": len(expected - seen),
        "duplicates": calls - len(seen & expected),
        "crashes": looper.crashes if looper else 0,
        "other_exits": len(looper.other_exits) if looper else 0,
        "crash_looper_events": len(ours),
    }


def measure_degraded(fs: FaultSettings, run: int) -> dict[str, Any]:
    load = load_average()
    healthy = throughput_run(fs, run, crash=False)
    crashing = throughput_run(fs, run, crash=True)
    return {
        "healthy_events_per_s": healthy["events_per_s"],
        "crash_events_per_s": crashing["events_per_s"],
        "ratio_pct": round(100 * crashing["events_per_s"] / healthy["events_per_s"], 1),
        "crashes": crashing["crashes"],
        "other_exits": crashing["other_exits"],
        "crash_looper_events": crashing["crash_looper_events"],
        "duplicates": crashing["duplicates"],
        "healthy_duplicates": healthy["duplicates"],
        "missing": healthy["missing"] + crashing["missing"],
        "load1": load,
    }


SHOWN: dict[str, list[tuple[str, str, str]]] = {
    "recovery-kill": [
        ("recovery_s", "s, SIGKILL → first of its partitions' events at the other", ".3f"),
        ("reassigned_s", "s, SIGKILL → stats() shows its partitions moved", ".3f"),
        ("victim_partitions", "partitions the killed subscriber owned", ".0f"),
        ("redelivered", "its partitions' events redelivered (attempt > 1)", ".0f"),
    ],
    "recovery-stop": [
        ("recovery_s", "s, SIGSTOP → first of its partitions' events at the other", ".3f"),
        ("reassigned_s", "s, SIGSTOP → stats() shows its partitions moved", ".3f"),
        ("victim_partitions", "partitions the frozen subscriber owned", ".0f"),
        ("redelivered", "its partitions' events redelivered (attempt > 1)", ".0f"),
    ],
    "degraded": [
        ("healthy_events_per_s", "events/s, healthy (first publish → last ack)", ",.0f"),
        ("crash_events_per_s", "events/s, one subscriber crash-looping", ",.0f"),
        ("ratio_pct", "crash-looping / healthy (%)", ".1f"),
        ("crashes", "crashes (exit 137) of the crash-looping subscriber", ".0f"),
        ("crash_looper_events", "events it processed, all incarnations", ",.0f"),
        ("duplicates", "duplicate handler calls, crash-looping run", ",.0f"),
        ("healthy_duplicates", "duplicate handler calls, healthy run", ",.0f"),
        ("missing", "events never processed (both runs)", ",.0f"),
    ],
}


def targets_for(ack_timeout_s: float) -> dict[tuple[str, str], Target]:
    recovery = 2 * ack_timeout_s
    return {
        ("recovery-kill", "recovery_s"): Target("recovery_s", "<=", recovery),
        ("recovery-stop", "recovery_s"): Target("recovery_s", "<=", recovery),
        ("degraded", "ratio_pct"): Target("ratio_pct", ">=", 50),
        ("degraded", "missing"): Target("missing", "<=", 0),
    }


def describe(name: str, fs: FaultSettings) -> str:
    timeout = f"ack timeout {fs.ack_timeout:g} s, max attempts {fs.max_attempts or 3}"
    if name.startswith("recovery"):
        how = "SIGKILL" if name == "recovery-kill" else "SIGSTOP"
        return (
            f"2 subscribers (prefetch {fs.prefetch}), {fs.rate:,g} events/s over "
            f"{fs.partitions} partitions, {how} one; {timeout}"
        )
    return (
        f"{fs.events:,} x {fs.payload_size} B, batch {fs.batch_size}, "
        f"{fs.degraded_partitions} partitions, {fs.subscribers} subscribers; one with "
        f"crash-after:{fs.crash_after}, restarted on exit"
    )


MEASURE: dict[str, Callable[[FaultSettings, int], dict[str, Any]]] = {
    "recovery-kill": lambda fs, run: measure_recovery(fs, run, signal.SIGKILL),
    "recovery-stop": lambda fs, run: measure_recovery(fs, run, signal.SIGSTOP),
    "degraded": measure_degraded,
}


# -- command line ------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "scripts/bench_faults.py",
        __doc__,
        "Targets (issue 3): recovery ≤ twice the ack timeout (10 s by default); throughput "
        "with a crash-looping subscriber ≥ 50 % of the healthy one; nothing lost.",
        MEASUREMENTS,
    )
    add_fault_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.subscribers < 2:
        print("bench_faults: --subscribers must be at least 2", file=sys.stderr)
        return 2
    return bench_main(
        args,
        prog="bench_faults",
        build=lambda workdir: settings_from_args(args, workdir),
        measure=MEASURE,
        describe=describe,
        shown=SHOWN,
        targets=targets_for(args.ack_timeout or DEFAULT_ACK_TIMEOUT_S),
        title=f"Fault handling benchmark: {args.store} store, {args.runs} run(s) each, "
        "median first",
    )


if __name__ == "__main__":
    sys.exit(main())
