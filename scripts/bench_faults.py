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
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_support.procs import (
    ROOT,
    BenchError,
    Proc,
    ProcGroup,
    load_average,
    log,
)
from bench_support.report import Target, add_store_flag, bench_main, make_parser, positive
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
DEFAULT_ACK_TIMEOUT_S = 5.0
"""The broker's default ``--ack-timeout`` (ChannelConfig.ack_timeout_s)."""
STREAM_PUBLISHER = "stream"
POLL_S = 0.01
CRASH_EXIT_CODE = 137
MAX_ODD_EXITS = 5
"""Exits of the crash-looping subscriber that were not its crash, in a row, before the
run gives up (it would otherwise restart a broken command forever)."""


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


# -- recovery ----------------------------------------------------------------------------
class Streamer:
    """Publishes ``per_tick`` events every ``tick_s`` from a thread of its own (which owns
    the publisher's proxy) until stopped."""

    def __init__(self, ns_port: int, maker: EventMaker, per_tick: int, tick_s: float) -> None:
        self._ns_port = ns_port
        self._maker = maker
        self._per_tick = per_tick
        self._tick_s = tick_s
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.published = 0
        self._thread = threading.Thread(target=self._run, name="streamer", daemon=True)

    def __enter__(self) -> Streamer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30.0)

    def _run(self) -> None:
        from publisher.client import Publisher

        try:
            with Publisher(
                CHANNEL, self._maker.publisher_id, ns_port=self._ns_port, state_dir=None
            ) as pub:
                self.published = publish_count(
                    pub, self._maker, 10**12, self._per_tick, self._tick_s, self._stop
                )
        except BaseException as exc:
            self._error = exc

    def stop(self) -> int:
        """Stop publishing; returns how many events were published."""
        self._stop.set()
        self._thread.join(30.0)
        if self._thread.is_alive():
            raise BenchError("the streaming publisher did not stop")
        if self._error is not None:
            raise BenchError(f"streaming publisher failed: {self._error!r}")
        return self.published

    def check(self) -> None:
        if self._error is not None:
            raise BenchError(f"streaming publisher failed: {self._error!r}")


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
class CrashLooper:
    """Keeps one ``python -m subscriber run --fault crash-after:K`` subscriber running:
    whenever it exits, a new process with the same id is started, until ``stop``. Every
    incarnation appends the events it processed to one ``--record`` file."""

    def __init__(self, procs: ProcGroup, fs: FaultSettings, ns_port: int, sub_id: str) -> None:
        self._procs = procs
        self.sub_id = sub_id
        self.record = procs.workdir / f"{sub_id}.jsonl"
        self._argv = [
            fs.python, "-m", "subscriber", "run",
            "--ns-port", str(ns_port),
            "--channel", CHANNEL,
            "--id", sub_id,
            "--fault", f"crash-after:{fs.crash_after}",
            "--record", str(self.record),
            "--quiet",
        ]  # fmt: skip
        if fs.degraded_prefetch is not None:
            self._argv += ["--prefetch", str(fs.degraded_prefetch)]
        self.crashes = 0
        self.other_exits: list[int] = []
        self._current: Proc | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="crash-looper", daemon=True)
        self.error: str | None = None

    def _spawn(self) -> Proc:
        name = f"{self.sub_id}-{self.crashes + len(self.other_exits) + 1}"
        return self._procs.start(name, self._argv, rf"subscriber {self.sub_id} ready")

    def start(self) -> None:
        self._current = self._spawn()
        self._current.wait_ready()
        self._thread.start()

    def _watch(self) -> None:
        odd_in_a_row = 0
        while not self._stop.wait(POLL_S):
            assert self._current is not None
            code = self._current.popen.poll()
            if code is None:
                continue
            if code == CRASH_EXIT_CODE:
                self.crashes += 1
                odd_in_a_row = 0
            else:
                self.other_exits.append(code)
                odd_in_a_row += 1
                log(f"{self._current.name} exited with {code}:\n{self._current.tail(5)}")
                if odd_in_a_row >= MAX_ODD_EXITS:
                    self.error = f"{self.sub_id} exited {odd_in_a_row} times without crashing"
                    return
            if not self._stop.is_set():
                self._current = self._spawn()

    def stop(self) -> None:
        """Stop restarting, then stop the incarnation running now (gracefully)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10.0)
        if self._current is not None:
            self._procs.stop([self._current])

    def processed(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        with self.record.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


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


if __name__ == "__main__":
    sys.exit(main())
