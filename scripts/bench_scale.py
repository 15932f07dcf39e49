#!/usr/bin/env python
"""How the service's cost grows: one end-to-end run per row, sweeping one dimension.

Sweeps (pick with ``--sweep``; fresh processes every row, SQLite store in a temp dir):

  subscribers  4 / 16 / 64 / 256 bench subscribers, 256 partitions
  keys         4 / 64 / 256 bench subscribers, every event in a partition of its own (a
               key per order: 1,000,000 partitions; a warm-up of 4,000 events only
               opens the connections)
  partitions   16 / 1,000 / 10,000 / 100,000 partitions, 4 subscribers; the warm-up has
               a publisher of its own, so the run opens all of its partitions (a
               partition is per publisher and partition): at 100,000 every event opens one
  open         the same with the run's partitions open already (the warm-up publishes
               as the run's publisher): the cost of holding many partitions without the
               cost of opening them
  channels     1 / 10 / 100 channels on one broker, the events spread round robin, one
               bench subscriber per channel (4 for a single channel)
  backlog      0 / 1,000,000 / 5,000,000 events published before any subscriber joins;
               the broker is restarted (SIGTERM, start on the same data) with the backlog
               queued, then the subscribers drain it (also printed: the first broker's
               RSS with the backlog queued, the second's once it restored it)
  prefetch     subscriber prefetch 10 / 25 / 100 / 1,000 (4 subscribers, 256 partitions):
               how full the pushes are. Below the table, the CPU per event is split
               into a part per event and a part per push (a least-squares line through
               the rows: CPU per event = per event + per push / events per push)

Each row: events/s (first publish, or for a backlog the subscribers' start, to the last
ack), publish-to-handler p99, broker RSS at the end and its peak, broker threads, broker
CPU per event (and the subscribers' together), events per push, and events/s as a share
of the sweep's first row.

With ``--pairs N`` each later row is run N times alternating with the sweep's first value
(first value then this one, then the other way round), and its ratio is the median of the
N per-pair ratios, which is how issue 16 states its targets (this VM's speed drifts by a
third within minutes, so one run per row can move a ratio by that much). A row's other
figures are those of its median run; ``pairs`` lists every pair's ratio, and ``target``
says whether the issue's bound for that row is met (10,000 partitions and 64 subscribers
at least 0.8; 100,000 partitions and 256 subscribers at least 0.5).

Run it with the project's venv:  .venv/bin/python scripts/bench_scale.py  (see --help).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import bench
from bench_support.procs import BenchError, ProcGroup, cpu_seconds, load_average, read_rss_kib
from bench_support.report import ms, percentile
from bench_support.service import (
    EventMaker,
    channel_proxy,
    fresh_store_args,
    publish_count,
    read_summaries,
    start_bench_subscribers,
    start_broker,
    wait_acked,
)

SWEEPS = ("subscribers", "keys", "partitions", "open", "channels", "backlog", "prefetch")
DEFAULTS = {
    "subscribers": [4, 16, 64, 256],
    "keys": [4, 64, 256],
    "partitions": [16, 1_000, 10_000, 100_000],
    "open": [16, 10_000, 100_000],
    "channels": [1, 10, 100],
    "backlog": [0, 1_000_000, 5_000_000],
    "prefetch": [10, 25, 100, 1_000],
}
QUICK = {
    "subscribers": [4, 16],
    "keys": [4, 16],
    "partitions": [16, 1_000],
    "open": [16, 1_000],
    "channels": [1, 4],
    "backlog": [0, 50_000],
    "prefetch": [10, 100],
}
SWEEP_PARTITIONS = 256  # the subscribers sweep's partitions
KEY_PARTITIONS = 1_000_000
"""The keys sweep's partitions: more than a row's events, so each lands in a new one."""
KEY_WARMUP_EVENTS = 4_000
"""The keys sweep's warm-up (4 events per partition would be 4 million)."""
BATCH = 100
BACKLOG_BYTES = "4G"
"""``--max-queued-bytes`` of a backlog run (the default 256 MiB holds about 1.9 million
events of 100 B)."""
RESTART_TIMEOUT_S = 600.0
"""Longest a broker may take to stop, or to restore a backlog and say it is ready."""
TARGETS = {
    ("partitions", 10_000): 0.8,
    ("partitions", 100_000): 0.5,
    ("subscribers", 64): 0.8,
    ("subscribers", 256): 0.5,
}
"""Issue 16's least share of the sweep's first row, by (sweep, value)."""


def value_list(text: str) -> list[int]:
    """``4,16,64`` (underscores allowed) as a list of positive integers."""
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text}"
        ) from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"needs non-negative integers: {text}")
    return values


def with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's events/s as a share of the first row's (the sweep's baseline)."""
    base = rows[0]["events_per_s"] if rows else None  # 0 when the first row failed
    return [r | {"ratio": round(r["events_per_s"] / base, 3) if base else None} for r in rows]


def paired_row(runs: list[dict[str, Any]], bases: list[dict[str, Any]]) -> dict[str, Any]:
    """A row from N runs of a value, each alternating with a run of the baseline: the
    median run's figures, the median of the per-pair ratios, and every pair's ratio
    (a pair whose baseline failed counts as no ratio)."""
    ratios = [
        round(run["events_per_s"] / base["events_per_s"], 3) if base["events_per_s"] else None
        for run, base in zip(runs, bases, strict=True)
    ]
    known = [r for r in ratios if r is not None]
    return _median_run(runs) | {
        "ratio": round(statistics.median(known), 3) if known else None,
        "pairs": ratios,
    }


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The baseline's row: its median run, ratio 1 by definition."""
    return _median_run(runs) | {"ratio": 1.0}


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median events/s (the lower one of an even number)."""
    return sorted(runs, key=lambda r: r["events_per_s"])[(len(runs) - 1) // 2]


def with_targets(name: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the rows issue 16 sets a bound for: ``target`` is ``>= 0.8 ✓`` or ``✗`` (only
    when the sweep's baseline is the issue's: 16 partitions, 4 subscribers)."""
    if not rows or rows[0]["value"] != DEFAULTS[name][0]:
        return rows
    marked = rows[:1]
    for row in rows[1:]:
        bound = TARGETS.get((name, row["value"]))
        if bound is not None and row.get("ratio") is not None:
            row = row | {"target": f">= {bound} {'✓' if row['ratio'] >= bound else '✗'}"}
        marked.append(row)
    return marked


BACKLOG_KEYS = ("queued_mib", "restored_mib", "restart_s", "published_per_s")
"""A backlog row's own figures: the first broker's RSS with the backlog queued, the
second's once it restored it."""


def row_of(value: int, result: dict[str, Any], events: int) -> dict[str, Any]:
    return {
        "value": value,
        "events_per_s": result["events_per_s"],
        "p99_ms": result.get("p99_ms"),
        "rss_mib": result.get("broker_rss_mib"),
        "peak_mib": result.get("broker_peak_mib"),
        "threads": result.get("broker_threads"),
        "cpu_us_per_event": _per_event(result["cpu_broker_s"], events),
        "subs_cpu_us_per_event": _per_event(result.get("cpu_subscribers_s"), events),
        "events_per_push": result.get("events_per_push"),
    } | {k: result[k] for k in BACKLOG_KEYS if k in result}


def _per_event(cpu_s: float | None, events: int) -> float | None:
    return None if cpu_s is None else round(cpu_s / events * 1e6, 1)


def push_cost(rows: list[dict[str, Any]], column: str) -> tuple[float, float] | None:
    """``column`` (CPU µs per event) as ``per_event + per_push / events_per_push``, the
    least-squares line through the rows; None with fewer than two distinct push sizes."""
    points = [
        (1 / r["events_per_push"], r[column])
        for r in rows
        if r.get("events_per_push") and r.get(column) is not None
    ]
    if len({x for x, _ in points}) < 2:
        return None
    per_push, per_event = statistics.linear_regression(*zip(*points, strict=True))
    return per_event, per_push


# -- sweeps ------------------------------------------------------------------------------
def pipeline(settings: bench.Settings, label: str, **changes: int) -> dict[str, Any]:
    s = replace(settings, **changes)
    return bench.pipeline_run(s, label, 1, s.events, s.batch_size)


def with_room(s: bench.Settings, subscribers: int) -> bench.Settings:
    """Each subscriber holds a connection to the broker (acks, heartbeats): past the
    default ``--max-connections`` (256) the broker gets room for all of them."""
    room = ["--max-connections", str(max(256, 2 * subscribers + 64))]
    return replace(s, broker_args=[*s.broker_args, *room])


def sweep_subscribers(s: bench.Settings, value: int) -> dict[str, Any]:
    s = with_room(s, value)
    return pipeline(s, f"subs{value}", subscribers=value, partitions=SWEEP_PARTITIONS)


def sweep_keys(s: bench.Settings, value: int) -> dict[str, Any]:
    """A key per order: every event opens a partition, which is assigned to the least
    loaded of ``value`` subscribers and persisted, then dropped once idle."""
    s = replace(with_room(s, value), warmup_events=KEY_WARMUP_EVENTS)
    return pipeline(s, f"keys{value}", subscribers=value, partitions=KEY_PARTITIONS)


def sweep_partitions(s: bench.Settings, value: int) -> dict[str, Any]:
    return pipeline(s, f"parts{value}", partitions=value, subscribers=4)


def sweep_open(s: bench.Settings, value: int) -> dict[str, Any]:
    return pipeline(
        replace(s, open_partitions=True), f"open{value}", partitions=value, subscribers=4
    )


def sweep_prefetch(s: bench.Settings, value: int) -> dict[str, Any]:
    """A small prefetch makes small pushes: the same events cost more RPCs and acks."""
    return pipeline(s, f"prefetch{value}", prefetch=value, subscribers=4, partitions=256)


def sweep_channels(s: bench.Settings, value: int) -> dict[str, Any]:
    """``value`` channels on one broker, a bench subscriber each (4 for one channel), the
    events published round robin over them in batches, from this process."""
    from publisher.client import Publisher

    names = [f"c{i}" for i in range(value)]
    per_channel = 4 if value == 1 else 1
    with ProcGroup(s.workdir / f"channels{value}") as procs:
        extra = [arg for name in names[1:] for arg in ("--channel", name)]
        broker, ns_port = start_broker(
            procs,
            s.python,
            fresh_store_args(procs, s.store),
            capacity=max(1_000_000, 2 * s.events),
            extra_args=[*extra, *s.broker_args],
            channel=names[0],
        )
        subs = []
        for name in names:
            ids = [f"{name}-s{k}" for k in range(per_channel)]
            subs += start_bench_subscribers(procs, s.python, ns_port, ids, s.prefetch, (), name)
        publishers = [Publisher(name, "bench", ns_port=ns_port, state_dir=None) for name in names]
        makers = [EventMaker(f"p{name}", 16, s.payload_size) for name in names]
        cpu0, t0 = cpu_seconds(broker.pid), time.time()
        per = s.events // value
        for _ in range(max(1, per // s.batch_size)):
            for pub, maker in zip(publishers, makers, strict=True):
                publish_count(pub, maker, s.batch_size, s.batch_size)
        sent = max(1, per // s.batch_size) * s.batch_size
        t_end = max(wait_acked(channel_proxy(ns_port, n), sent, 120.0) for n in names)
        status, cpu = read_rss_kib(broker.pid), cpu_seconds(broker.pid) - cpu0
        for pub in publishers:
            pub.close()
        procs.stop([p for p, _ in subs])
        latencies = sorted(x for sm in read_summaries(subs) for x in sm["latencies"])
    return _result(sent * value, t_end - t0, cpu, status, latencies)


def sweep_backlog(s: bench.Settings, value: int) -> dict[str, Any]:
    """``value`` events queued with no subscriber, a broker restart with them queued, then
    4 subscribers drain them (``s.events`` when ``value`` is 0: the plain pipeline)."""
    if value == 0:
        return pipeline(s, "backlog0", subscribers=4, partitions=16)
    from publisher.client import Publisher

    with ProcGroup(s.workdir / f"backlog{value}") as procs:
        store = [*fresh_store_args(procs, s.store), "--max-queued-bytes", BACKLOG_BYTES]
        broker, ns_port = start_broker(procs, s.python, store, capacity=value + 1, name="broker-a")
        maker = EventMaker("backlog", 16, s.payload_size)
        with Publisher(bench.CHANNEL, "bench", ns_port=ns_port, state_dir=None) as pub:
            t0 = time.time()
            publish_count(pub, maker, value, 1_000)
            published_s = time.time() - t0
        queued = read_rss_kib(broker.pid)
        procs.stop([broker], timeout_s=RESTART_TIMEOUT_S)  # SIGTERM: a clean stop
        t_restart = time.monotonic()
        broker, _ = start_broker(
            procs, s.python, store, capacity=value + 1, ns_port=ns_port, name="broker-b", wait=False
        )
        broker.wait_ready(RESTART_TIMEOUT_S)
        restart_s = time.monotonic() - t_restart
        restored = read_rss_kib(broker.pid)
        cpu0, t1 = cpu_seconds(broker.pid), time.time()
        subs = start_bench_subscribers(procs, s.python, ns_port, [f"s{k}" for k in range(4)])
        t_end = wait_acked(channel_proxy(ns_port), value, max(120.0, value / 2_000))
        status, cpu = read_rss_kib(broker.pid), cpu_seconds(broker.pid) - cpu0
        procs.stop([p for p, _ in subs])
        latencies: list[float] = []  # a backlog's waits say nothing of the service's pace
    result = _result(value, t_end - t1, cpu, status, latencies)
    return result | {
        "queued_mib": round(queued["VmRSS"] / 1024, 1),
        "restored_mib": round(restored["VmRSS"] / 1024, 1),
        "restart_s": round(restart_s, 2),
        "published_per_s": round(value / published_s),
    }


def _result(
    events: int, seconds: float, cpu: float, status: dict[str, int], latencies: list[float]
) -> dict[str, Any]:
    return {
        "events_per_s": round(events / seconds, 1),
        "p99_ms": ms(percentile(latencies, 99)),
        "cpu_broker_s": cpu,
        "broker_rss_mib": round(status["VmRSS"] / 1024, 1),
        "broker_peak_mib": round(status["VmHWM"] / 1024, 1),
        "broker_threads": status["Threads"],
    }


SWEEP: dict[str, Callable[[bench.Settings, int], dict[str, Any]]] = {
    "subscribers": sweep_subscribers,
    "keys": sweep_keys,
    "partitions": sweep_partitions,
    "open": sweep_open,
    "channels": sweep_channels,
    "backlog": sweep_backlog,
    "prefetch": sweep_prefetch,
}


# -- the command line --------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench_scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sweep", default=",".join(SWEEPS), help="comma-separated subset")
    for name in SWEEPS:
        parser.add_argument(
            f"--{name}-values", type=value_list, default=None, metavar="N,N,...",
            help=f"default {','.join(map(str, DEFAULTS[name]))}",
        )  # fmt: skip
    parser.add_argument("--events", type=int, default=100_000, help="events per row (100000)")
    parser.add_argument(
        "--pairs", type=int, default=1, metavar="N",
        help="run each later row N times, alternating with the first value; its ratio is "
        "the median of the per-pair ratios (default 1: one run per row)",
    )  # fmt: skip
    parser.add_argument(
        "--separate-cpus", action="store_true",
        help="the broker on CPU 0 and the bench subscribers on the other CPUs (see "
        "bench.py --help); by default the OS places them",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="small sweeps: a smoke run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--python", default=sys.executable, help="for the child processes")
    return parser


def settings(args: argparse.Namespace, workdir: Path) -> bench.Settings:
    flags = ["--separate-cpus"] if args.separate_cpus else []
    parsed = bench.build_parser().parse_args(["--python", args.python, *flags])
    s = bench.settings_from_args(parsed, workdir)
    return replace(s, events=10_000 if args.quick else args.events, batch_size=BATCH)


def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    chosen = [name.strip() for name in args.sweep.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SWEEPS))
    if unknown:
        raise BenchError(f"unknown sweep(s) {unknown}: choose from {', '.join(SWEEPS)}")
    if args.pairs < 1:
        raise BenchError(f"--pairs needs at least 1, got {args.pairs}")
    report: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        s = settings(args, Path(tmp))
        for name in chosen:
            values = getattr(args, f"{name}_values") or (QUICK if args.quick else DEFAULTS)[name]
            if args.pairs > 1 and len(values) > 1:
                rows = paired_sweep(s, name, values, args.pairs)
            else:
                rows = with_ratios([one_row(s, name, value) for value in values])
            report[name] = with_targets(name, rows)
    return report


def one_row(s: bench.Settings, name: str, value: int) -> dict[str, Any]:
    """One run of a sweep's value; a run that fails is reported in its row, not fatal."""
    print(f"[scale] {name} = {value:,} (load {load_average()})", file=sys.stderr)
    events = value if name == "backlog" and value else s.events
    try:
        return row_of(value, SWEEP[name](s, value), events)
    except Exception as exc:
        print(f"[scale] {name} = {value:,} failed: {exc}", file=sys.stderr)
        return {"value": value, "events_per_s": 0.0, "error": str(exc)[:200]}


def paired_sweep(
    s: bench.Settings, name: str, values: list[int], pairs: int
) -> list[dict[str, Any]]:
    """Each later value ``pairs`` times, alternating with the first (which goes first in
    even pairs, second in odd ones): the ratio of a row is the median of its pairs'."""
    base_value, bases = values[0], []
    rows = []
    for value in values[1:]:
        runs, their_bases = [], []
        for k in range(pairs):
            order = (base_value, value) if k % 2 == 0 else (value, base_value)
            done = {v: one_row(s, name, v) for v in order}
            runs.append(done[value])
            their_bases.append(done[base_value])
        bases += their_bases
        rows.append(paired_row(runs, their_bases))
    return [median_row(bases), *rows]


COLUMNS = (
    ("value", "{:,}"), ("events_per_s", "{:,.0f}"), ("ratio", "{:.2f}"), ("p99_ms", "{:.1f}"),
    ("rss_mib", "{:,.0f}"), ("peak_mib", "{:,.0f}"), ("threads", "{}"),
    ("cpu_us_per_event", "{:.1f}"), ("subs_cpu_us_per_event", "{:.1f}"),
    ("events_per_push", "{:.1f}"), ("queued_mib", "{:,.0f}"), ("restored_mib", "{:,.0f}"),
    ("restart_s", "{:.1f}"), ("published_per_s", "{:,.0f}"), ("target", "{}"),
    ("pairs", "{}"), ("error", "{}"),
)  # fmt: skip


def markdown(report: dict[str, list[dict[str, Any]]]) -> str:
    """The report as Markdown tables (docs/benchmarks.md takes them as they are)."""
    lines = []
    for name, rows in report.items():
        columns = [(key, fmt) for key, fmt in COLUMNS if any(r.get(key) is not None for r in rows)]
        lines += [f"\n{name}\n", "| " + " | ".join(k for k, _ in columns) + " |"]
        lines.append("|" + "---|" * len(columns))
        for r in rows:
            cells = [_cell(r.get(k), fmt) for k, fmt in columns]
            lines.append("| " + " | ".join(cells) + " |")
        if name == "prefetch":  # the sweep that varies only the push size
            lines += _push_costs(rows)
    return "\n".join(lines)


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return ""
    if isinstance(value, list):  # a row's pair ratios
        return " · ".join("failed" if v is None else f"{v:.2f}" for v in value)
    return fmt.format(value)


def _push_costs(rows: list[dict[str, Any]]) -> list[str]:
    """The per-event and per-push parts of the CPU, for the prefetch sweep (where only
    the push size varies: a line through another sweep's rows means nothing)."""
    lines = []
    for column, who in (("cpu_us_per_event", "broker"), ("subs_cpu_us_per_event", "subscribers")):
        if (fit := push_cost(rows, column)) is not None:
            per_event, per_push = fit
            lines.append(f"\n{who}: {per_event:.1f} µs per event + {per_push:,.0f} µs per push")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = load_average()
    try:
        report = run(args)
    except BenchError as exc:
        print(f"bench_scale: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"load1_at_start": started, "sweeps": report}))
    else:
        print(markdown(report))
        print(f"\n1-minute load average at start: {started} (other work skews every figure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
