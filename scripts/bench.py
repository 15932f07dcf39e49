#!/usr/bin/env python
"""Benchmark the event channel service with real processes on 127.0.0.1.

Measurements (pick with ``--only``; each is repeated ``--runs`` times, fresh processes
every run):

  throughput  broker + N bench subscribers + this process publishing E events of B bytes
              in batches of K over P partitions: events/s from the first publish to the
              last ack (the channel's ``stats()["acked"]``), and publish-to-handler latency
  batch1      the same with batches of 1 (fewer events)
  latency     a paced publisher at a fixed offered load: publish-to-handler p50 / p99
  raw         the Pyro5 ceiling: a trivial daemon ``receive(batch) -> [ids]`` in its own
              process, msgpack, the same event dicts, round trips from here
  memory      broker RSS per queued event: VmRSS before and after publishing M events
              with no subscriber

With ``--submit`` the throughput, batch1 and latency publishers give each batch to
``Publisher.submit`` instead of ``publish`` (its sender thread sends what queued up during
a round trip as one batch of up to 1,000 events), then wait for every submission. A
throughput run submits everything at once, so its latency counts the wait in the
publisher's queue.

Run it with the project's venv:  .venv/bin/python scripts/bench.py  (see --help).
Every child process is stopped at the end, also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_support.bench_settings import Settings, add_bench_flags, settings_from_args
from bench_support.procs import (
    ROOT,
    BenchError,
    Proc,
    ProcGroup,
    cpu_seconds,
    load_average,
    read_rss_kib,
)
from bench_support.report import (
    Target,
    bench_main,
    make_parser,
    ms,
    percentile,
)
from bench_support.service import (
    CHANNEL,
    SUPPORT,
    WARMUP_PUBLISHER,
    EventMaker,
    batch_counts,
    channel_proxy,
    per_batch,
    publish_checked,
    publish_count,
    read_summaries,
    start_bench_subscribers,
    subscriber_cpus,
    use_tls,
    wait_acked,
    warm_up,
)
from bench_support.service import start_run_broker as start_broker

sys.path.insert(0, str(ROOT))  # measure the checkout this script is in, whatever is installed
MEASUREMENTS = ("throughput", "batch1", "latency", "raw", "memory")
PUBLISHED = ("throughput", "batch1", "latency")
"""The measurements whose publisher ``--submit`` changes."""

TARGETS: dict[tuple[str, str], Target] = {
    ("throughput", "events_per_s"): Target("events_per_s", ">=", 40_000),
    ("batch1", "events_per_s"): Target("events_per_s", ">=", 1_500),
    ("latency", "p99_ms"): Target("p99_ms", "<=", 5.0),
    ("memory", "bytes_per_event"): Target("bytes_per_event", "<=", 300),
}


# -- the service's pieces ----------------------------------------------------------------
def start_subscribers(procs: ProcGroup, s: Settings, ns_port: int) -> list[tuple[Proc, Path]]:
    ids = [f"s{i}" for i in range(1, s.subscribers + 1)]
    prefix = subscriber_cpus() if s.separate_cpus else []
    return start_bench_subscribers(procs, s.python, ns_port, ids, s.prefetch, prefix=prefix)


# -- measurements ------------------------------------------------------------------------
def pipeline_run(
    s: Settings,
    label: str,
    run: int,
    count: int,
    batch_size: int,
    tick_s: float | None = None,
) -> dict[str, Any]:
    """One end-to-end run: broker, subscribers, publish ``count`` events from here (paced
    at ``batch_size`` events every ``tick_s`` when given; through ``Publisher.submit``
    with ``--submit``), wait for the last ack."""
    from publisher.client import Publisher

    with ProcGroup(s.workdir / f"{label}-{run}") as procs:
        load = load_average()
        broker, ns_port = start_broker(procs, s, capacity=max(1_000_000, 2 * count))
        subs = start_subscribers(procs, s, ns_port)
        channel = channel_proxy(ns_port)
        with channel, Publisher(CHANNEL, "bench", ns_port=ns_port, state_dir=None) as publisher:
            warm = s.warmup_events or max(batch_size, 4 * s.partitions)
            run_publisher = f"{label}{run}"
            warm_as = run_publisher if s.open_partitions else WARMUP_PUBLISHER
            baseline = warm_up(publisher, channel, s.partitions, s.payload_size, warm, warm_as)

            maker = EventMaker(run_publisher, s.partitions, s.payload_size)
            pids = [broker.pid] + [p.pid for p, _ in subs]
            cpu_before = [cpu_seconds(pid) for pid in pids] + [cpu_seconds()]
            batches_before = batch_counts(channel)
            t0 = time.time()
            publish_count(publisher, maker, count, batch_size, tick_s, submit=s.submit)
            t_published = time.time()
            t_acked = wait_acked(channel, baseline + count, max(60.0, count / 500))
            cpu_after = [cpu_seconds(pid) for pid in pids] + [cpu_seconds()]
            pushes = per_batch(batches_before, batch_counts(channel))
            broker_status = read_rss_kib(broker.pid)
        sub_procs = [p for p, _ in subs]
        procs.stop(sub_procs)
        summaries = read_summaries(subs)

    latencies = sorted(x for sm in summaries for x in sm["latencies"])
    received = sum(sm["count"] for sm in summaries)
    last_recv = max((sm["last_recv"] for sm in summaries if sm["last_recv"]), default=None)
    cpu = [after - before for before, after in zip(cpu_before, cpu_after, strict=True)]
    result: dict[str, Any] = {
        "events": count,
        "batch_size": batch_size,
        "seconds": round(t_acked - t0, 4),
        "events_per_s": round(count / (t_acked - t0), 1),
        "publish_events_per_s": round(count / (t_published - t0), 1),
        "handler_events_per_s": round(count / (last_recv - t0), 1) if last_recv else None,
        "p50_ms": ms(percentile(latencies, 50)),
        "p99_ms": ms(percentile(latencies, 99)),
        "max_ms": ms(latencies[-1] if latencies else None),
        "received": received,
        "duplicates": sum(sm["duplicates"] for sm in summaries),
        "per_subscriber": [sm["count"] for sm in summaries],
        **pushes,
        # CPU seconds used while measuring (the stats polling included), and the machine's
        # 1-minute load average when the run started (other work skews every figure)
        "cpu_broker_s": round(cpu[0], 2),
        "cpu_subscribers_s": round(sum(cpu[1:-1]), 2),
        "cpu_publisher_s": round(cpu[-1], 2),
        "broker_rss_mib": round(broker_status["VmRSS"] / 1024, 1),
        "broker_peak_mib": round(broker_status["VmHWM"] / 1024, 1),
        "broker_threads": broker_status["Threads"],
        "load1": load,
    }
    if received < count:
        raise BenchError(f"{label}: subscribers saw {received} of {count} events")
    return result


def measure_throughput(s: Settings, run: int) -> dict[str, Any]:
    return pipeline_run(s, "throughput", run, s.events, s.batch_size)


def measure_batch1(s: Settings, run: int) -> dict[str, Any]:
    return pipeline_run(s, "batch1", run, s.batch1_events, 1)


def measure_latency(s: Settings, run: int) -> dict[str, Any]:
    tick_s = s.latency_tick_ms / 1000
    per_tick = max(1, round(s.latency_rate * tick_s))
    count = per_tick * max(1, round(s.latency_seconds / tick_s))
    result = pipeline_run(s, "latency", run, count, per_tick, tick_s)
    result["offered_events_per_s"] = result.pop("publish_events_per_s")
    return result


def measure_raw(s: Settings, run: int) -> dict[str, Any]:
    from channel_server.wire import ANONYMOUS, make_proxy

    load = load_average()
    with ProcGroup(s.workdir / f"raw-{run}") as procs:
        server = procs.start(
            "raw-server", [s.python, str(SUPPORT / "raw_server.py")], r"raw-server ready (\S+)"
        )
        uri = server.wait_ready().group(1)
        maker = EventMaker("raw", s.partitions, s.payload_size)
        batches = math.ceil(s.raw_events / s.raw_batch_size)
        # A bare daemon knows no secret: this process's own token would make the proxy
        # ask it for a proof and refuse it.
        with make_proxy(uri, 10.0, ANONYMOUS) as proxy:
            for _ in range(20):  # connect and warm up
                proxy.receive(maker.batch(s.raw_batch_size))
            payloads = [maker.batch(s.raw_batch_size) for _ in range(min(batches, 100))]
            t0 = time.perf_counter()
            for i in range(batches):
                ids = proxy.receive(payloads[i % len(payloads)])
                if len(ids) != s.raw_batch_size:
                    raise BenchError(f"raw server returned {len(ids)} ids")
            elapsed = time.perf_counter() - t0
    events = batches * s.raw_batch_size
    return {
        "events": events,
        "batch_size": s.raw_batch_size,
        "seconds": round(elapsed, 4),
        "events_per_s": round(events / elapsed, 1),
        "calls_per_s": round(batches / elapsed, 1),
        "load1": load,
    }


def measure_memory(s: Settings, run: int) -> dict[str, Any]:
    from publisher.client import Publisher

    warm_count = 1_000
    load = load_average()
    with ProcGroup(s.workdir / f"memory-{run}") as procs:
        broker, ns_port = start_broker(procs, s, capacity=s.memory_events + 10 * warm_count)
        channel = channel_proxy(ns_port)
        with channel, Publisher(CHANNEL, "bench", ns_port=ns_port, state_dir=None) as publisher:
            warm = EventMaker(WARMUP_PUBLISHER, s.partitions, s.payload_size)
            publish_checked(publisher, warm.batch(warm_count))
            before = read_rss_kib(broker.pid)
            maker = EventMaker(f"mem{run}", s.partitions, s.payload_size)
            t0 = time.perf_counter()
            publish_count(publisher, maker, s.memory_events, s.memory_batch_size)
            elapsed = time.perf_counter() - t0
            stats = channel.stats()
            after = read_rss_kib(broker.pid)
        if stats["unacked"] != warm_count + s.memory_events:
            raise BenchError(f"expected {warm_count + s.memory_events} queued: {stats}")
    grown = (after["VmRSS"] - before["VmRSS"]) * 1024
    return {
        "events": s.memory_events,
        "batch_size": s.memory_batch_size,
        "rss_before_mib": round(before["VmRSS"] / 1024, 1),
        "rss_after_mib": round(after["VmRSS"] / 1024, 1),
        "hwm_after_mib": round(after["VmHWM"] / 1024, 1),
        "bytes_per_event": round(grown / s.memory_events, 1),
        "publish_events_per_s": round(s.memory_events / elapsed, 1),
        "load1": load,
    }


MEASURE: dict[str, Callable[[Settings, int], dict[str, Any]]] = {
    "throughput": measure_throughput,
    "batch1": measure_batch1,
    "latency": measure_latency,
    "raw": measure_raw,
    "memory": measure_memory,
}

# What the table shows for each measurement: (metric key, label, format).
SHOWN: dict[str, list[tuple[str, str, str]]] = {
    "throughput": [
        ("events_per_s", "events/s, first publish → last ack", ",.0f"),
        ("publish_events_per_s", "events/s, publish calls only", ",.0f"),
        ("p50_ms", "latency p50 (ms) under full load", ".2f"),
        ("p99_ms", "latency p99 (ms) under full load", ".2f"),
        ("cpu_broker_s", "CPU s: broker", ".2f"),
        ("cpu_subscribers_s", "CPU s: subscribers (all)", ".2f"),
        ("cpu_publisher_s", "CPU s: publisher (this process)", ".2f"),
        ("events_per_push", "events per push (each costs an RPC and an ack)", ".1f"),
    ],
    "batch1": [
        ("events_per_s", "events/s, first publish → last ack", ",.0f"),
        ("p99_ms", "latency p99 (ms)", ".2f"),
    ],
    "latency": [
        ("offered_events_per_s", "offered load (events/s)", ",.0f"),
        ("p50_ms", "latency p50 (ms)", ".2f"),
        ("p99_ms", "latency p99 (ms)", ".2f"),
        ("max_ms", "latency max (ms)", ".2f"),
    ],
    "raw": [("events_per_s", "events/s, Pyro5 round trips", ",.0f")],
    "memory": [
        ("bytes_per_event", "broker RSS bytes per queued event", ",.0f"),
        ("rss_after_mib", "broker RSS after (MiB)", ",.0f"),
        ("publish_events_per_s", "events/s publishing (no subscriber)", ",.0f"),
    ],
}


def describe(name: str, s: Settings) -> str:
    text = {
        "throughput": f"{s.events:,} x {s.payload_size} B, batch {s.batch_size}, "
        f"{s.partitions} partitions, {s.subscribers} subscribers",
        "batch1": f"{s.batch1_events:,} x {s.payload_size} B, batch 1, "
        f"{s.partitions} partitions, {s.subscribers} subscribers",
        "latency": f"{s.latency_rate:,g} events/s for {s.latency_seconds:g} s "
        f"({max(1, round(s.latency_rate * s.latency_tick_ms / 1000))} every "
        f"{s.latency_tick_ms:g} ms), {s.subscribers} subscribers",
        "raw": f"{s.raw_events:,} events in batches of {s.raw_batch_size}, msgpack",
        "memory": f"{s.memory_events:,} x {s.payload_size} B queued, no subscriber",
    }[name]
    if s.submit and name in PUBLISHED:
        text += ", through Publisher.submit"
    return text


# -- command line ------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "scripts/bench.py",
        __doc__,
        "Targets: throughput ≥ 40,000 events/s; batch1 ≥ 1,500 events/s; "
        "latency p99 ≤ 5 ms at 1,000 events/s; memory ≤ 300 B per queued event (issue 16).",
        MEASUREMENTS,
    )
    add_bench_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tls:
        use_tls(Path(tempfile.mkdtemp(prefix="bench-tls-")))
    return bench_main(
        args,
        prog="bench",
        build=lambda workdir: settings_from_args(args, workdir),
        measure=MEASURE,
        describe=describe,
        shown=SHOWN,
        targets=TARGETS,
        title=f"Event channel benchmark: {args.store} store, {args.runs} run(s) each, median first",
    )


if __name__ == "__main__":
    sys.exit(main())
