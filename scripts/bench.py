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

Run it with the project's venv:  .venv/bin/python scripts/bench.py  (see --help).
Every child process is stopped at the end, also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # measure the checkout this script is in, whatever is installed
SUPPORT = Path(__file__).resolve().parent / "bench_support"
HOST = "127.0.0.1"
CHANNEL = "bench"
WARMUP_PUBLISHER = "warmup"
MEASUREMENTS = ("throughput", "batch1", "latency", "raw", "memory")
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
ACK_POLL_S = 0.01
BROKER_READY = r"broker \S+ ready at"


@dataclass(frozen=True)
class Target:
    metric: str
    op: str  # ">=" or "<="
    value: float

    def met(self, measured: float | None) -> bool | None:
        if measured is None:
            return None
        return measured >= self.value if self.op == ">=" else measured <= self.value

    def __str__(self) -> str:
        return f"{'≥' if self.op == '>=' else '≤'} {self.value:,g}"


TARGETS: dict[tuple[str, str], Target] = {
    ("throughput", "events_per_s"): Target("events_per_s", ">=", 40_000),
    ("batch1", "events_per_s"): Target("events_per_s", ">=", 1_500),
    ("latency", "p99_ms"): Target("p99_ms", "<=", 10.0),
    ("memory", "bytes_per_event"): Target("bytes_per_event", "<=", 600),
}


class BenchError(RuntimeError):
    """A measurement could not be made (a process did not start, a wait timed out)."""


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- processes ---------------------------------------------------------------------------
class Proc:
    """A child process in its own session; its stdout+stderr go to a log file, read by a
    thread that also watches for the ready line."""

    def __init__(self, name: str, argv: list[str], log_path: Path, ready: str | None) -> None:
        self.name = name
        self.log_path = log_path
        self._ready_re = re.compile(ready) if ready else None
        self._ready = threading.Event()
        self.ready_match: re.Match[str] | None = None
        pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=pythonpath)
        self._log: TextIO = log_path.open("w", encoding="utf-8")
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a terminal Ctrl-C reaches only us; we stop them
            preexec_fn=_die_with_parent,
        )
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._log.write(line)
            self._log.flush()
            if self._ready_re and not self._ready.is_set():
                match = self._ready_re.search(line)
                if match:
                    self.ready_match = match
                    self._ready.set()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self.popen.poll() is not None:
                self._reader.join(1.0)
                raise BenchError(
                    f"{self.name} exited with {self.popen.returncode} before it was ready:\n"
                    + self.tail()
                )
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name} not ready after {timeout_s:g} s:\n" + self.tail())
        assert self.ready_match is not None
        return self.ready_match

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join("    " + ln for ln in text.splitlines()[-lines:])

    def close_log(self) -> None:
        self._reader.join(2.0)
        with contextlib.suppress(OSError):
            self._log.close()


class ProcGroup:
    """Owns child processes; ``stop`` sends SIGTERM to all, waits, then SIGKILLs."""

    _live: list[ProcGroup] = []

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []
        self.scratch: list[Path] = []
        """Directories deleted once the processes are stopped (the broker's store)."""
        ProcGroup._live.append(self)

    def __enter__(self) -> ProcGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, name: str, argv: list[str], ready: str | None = None) -> Proc:
        proc = Proc(name, argv, self.workdir / f"{name}.log", ready)
        self.procs.append(proc)
        return proc

    def stop(self, procs: list[Proc], timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Graceful stop of some processes, at once; SIGKILL after the timeout."""
        for proc in procs:
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{proc.name} did not stop within {timeout_s:g} s: SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.kill()
                proc.popen.wait(5.0)
            proc.close_log()

    def close(self) -> None:
        """Stop everything still running, newest first (subscribers before the broker)."""
        with _signals_ignored():
            alive = [p for p in reversed(self.procs) if p.popen.poll() is None]
            subs = [p for p in alive if not p.name.startswith("broker")]
            self.stop(subs)
            self.stop([p for p in alive if p not in subs])
            for proc in self.procs:
                proc.close_log()
            for path in self.scratch:
                shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(ValueError):
                ProcGroup._live.remove(self)

    @classmethod
    def kill_all(cls) -> None:
        """Last resort at interpreter exit."""
        for group in list(cls._live):
            for proc in group.procs:
                if proc.popen.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.popen.kill()


atexit.register(ProcGroup.kill_all)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """Let cleanup finish even when Ctrl-C is pressed again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if this driver dies, even by SIGKILL (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def read_rss_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB (from /proc/<pid>/status)."""
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
    return values


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time of a process (all its threads); ``None`` is this process."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


# -- the service's pieces ----------------------------------------------------------------
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


def start_broker(procs: ProcGroup, s: Settings, capacity: int) -> tuple[Proc, int]:
    """A broker with an embedded name server on a free port, hosting the bench channel.

    Its store is fresh every run: SQLite (the service's default) in the run's directory,
    deleted when the run's processes stop, or ``--memory``."""
    ns_port = free_port()
    if s.store == "memory":
        store_args = ["--memory"]
    else:
        data_dir = procs.workdir / "data"
        procs.scratch.append(data_dir)
        store_args = ["--data-dir", str(data_dir)]
    argv = [
        s.python, "-m", "channel_server", "serve",
        "--ns-port", str(ns_port),
        "--channel", CHANNEL,
        "--capacity", str(capacity),
        "--log-level", s.log_level,
        *store_args,
        *s.broker_args,
    ]  # fmt: skip
    broker = procs.start("broker", argv, BROKER_READY)
    broker.wait_ready()
    return broker, ns_port


def start_subscribers(procs: ProcGroup, s: Settings, ns_port: int) -> list[tuple[Proc, Path]]:
    subs = []
    for i in range(1, s.subscribers + 1):
        sub_id = f"s{i}"
        out = procs.workdir / f"{sub_id}.json"
        argv = [
            s.python, str(SUPPORT / "sub.py"),
            "--ns-port", str(ns_port),
            "--channel", CHANNEL,
            "--id", sub_id,
            "--out", str(out),
            "--skip-publisher", WARMUP_PUBLISHER,
        ]  # fmt: skip
        if s.prefetch is not None:
            argv += ["--prefetch", str(s.prefetch)]
        subs.append((procs.start(sub_id, argv, rf"bench-sub {sub_id} ready"), out))
    for proc, _ in subs:  # they start in parallel
        proc.wait_ready()
    return subs


def channel_proxy(ns_port: int) -> Any:
    from channel_server.lookup import resolve_channel
    from channel_server.wire import make_proxy

    return make_proxy(resolve_channel(HOST, ns_port, CHANNEL), 10.0)


class EventMaker:
    """Event dicts as the publisher library makes them, stamped when the batch is built."""

    def __init__(self, publisher_id: str, partitions: int, payload_size: int) -> None:
        self.publisher_id = publisher_id
        self.partitions = partitions
        self.payload = "x" * payload_size
        self.seq = 0

    def batch(self, size: int) -> list[dict[str, Any]]:
        now = time.time()
        events = []
        for _ in range(size):
            self.seq += 1
            events.append(
                {
                    "id": f"{self.publisher_id}-{self.seq}",
                    "publisher_id": self.publisher_id,
                    "partition": self.seq % self.partitions,
                    "timestamp": now,
                    "payload": self.payload,
                }
            )
        return events


def publish_checked(publisher: Any, batch: list[dict[str, Any]]) -> None:
    summary = publisher.publish(batch)
    if summary["accepted"] != len(batch):
        raise BenchError(f"publish accepted {summary['accepted']} of {len(batch)}: {summary}")


def wait_acked(channel: Any, target: int, timeout_s: float) -> float:
    """Poll the channel until ``acked >= target``; returns the time.time() it was seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = channel.stats()
        if stats["acked"] >= target:
            return time.time()
        if time.monotonic() > deadline:
            raise BenchError(
                f"only {stats['acked']} of {target} events acked after {timeout_s:g} s "
                f"(accepted {stats['accepted']}, unacked {stats['unacked']})"
            )
        time.sleep(ACK_POLL_S)


def percentile(sorted_values: list[float], p: float) -> float | None:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


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
    at ``batch_size`` events every ``tick_s`` when given), wait for the last ack."""
    from publisher.client import Publisher

    with ProcGroup(s.workdir / f"{label}-{run}") as procs:
        load = load_average()
        broker, ns_port = start_broker(procs, s, capacity=max(1_000_000, 2 * count))
        subs = start_subscribers(procs, s, ns_port)
        channel = channel_proxy(ns_port)
        with channel, Publisher(CHANNEL, "bench", ns_port=ns_port) as publisher:
            warm = EventMaker(WARMUP_PUBLISHER, s.partitions, s.payload_size)
            publish_checked(publisher, warm.batch(max(batch_size, 4 * s.partitions)))
            baseline = warm.seq
            wait_acked(channel, baseline, 30.0)

            maker = EventMaker(f"{label}{run}", s.partitions, s.payload_size)
            batches = math.ceil(count / batch_size)
            pids = [broker.pid] + [p.pid for p, _ in subs]
            cpu_before = [cpu_seconds(pid) for pid in pids] + [cpu_seconds()]
            t0 = time.time()
            next_tick = time.perf_counter()
            for i in range(batches):
                if tick_s is not None:
                    delay = next_tick - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    next_tick += tick_s
                publish_checked(publisher, maker.batch(min(batch_size, count - i * batch_size)))
            t_published = time.time()
            t_acked = wait_acked(channel, baseline + count, max(60.0, count / 500))
            cpu_after = [cpu_seconds(pid) for pid in pids] + [cpu_seconds()]
        sub_procs = [p for p, _ in subs]
        procs.stop(sub_procs)
        summaries = []
        for proc, out in subs:
            if not out.exists():
                raise BenchError(f"{proc.name} wrote no summary:\n{proc.tail()}")
            summaries.append(json.loads(out.read_text()))

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
        "p50_ms": _ms(percentile(latencies, 50)),
        "p99_ms": _ms(percentile(latencies, 99)),
        "max_ms": _ms(latencies[-1] if latencies else None),
        "received": received,
        "duplicates": sum(sm["duplicates"] for sm in summaries),
        "per_subscriber": [sm["count"] for sm in summaries],
        # CPU seconds used while measuring (the stats polling included), and the machine's
        # 1-minute load average when the run started (other work skews every figure)
        "cpu_broker_s": round(cpu[0], 2),
        "cpu_subscribers_s": round(sum(cpu[1:-1]), 2),
        "cpu_publisher_s": round(cpu[-1], 2),
        "load1": load,
    }
    if received < count:
        raise BenchError(f"{label}: subscribers saw {received} of {count} events")
    return result


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


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
    from channel_server.wire import make_proxy

    load = load_average()
    with ProcGroup(s.workdir / f"raw-{run}") as procs:
        server = procs.start(
            "raw-server", [s.python, str(SUPPORT / "raw_server.py")], r"raw-server ready (\S+)"
        )
        uri = server.wait_ready().group(1)
        maker = EventMaker("raw", s.partitions, s.payload_size)
        batches = math.ceil(s.raw_events / s.raw_batch_size)
        with make_proxy(uri, 10.0) as proxy:
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
        with channel, Publisher(CHANNEL, "bench", ns_port=ns_port) as publisher:
            warm = EventMaker(WARMUP_PUBLISHER, s.partitions, s.payload_size)
            publish_checked(publisher, warm.batch(warm_count))
            before = read_rss_kib(broker.pid)
            maker = EventMaker(f"mem{run}", s.partitions, s.payload_size)
            t0 = time.perf_counter()
            left = s.memory_events
            while left > 0:
                size = min(s.memory_batch_size, left)
                publish_checked(publisher, maker.batch(size))
                left -= size
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
    return {
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


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    medians: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        if values and not isinstance(runs[0][key], bool):
            medians[key] = statistics.median(values)
    return medians


def render_table(results: dict[str, Any], s: Settings, console_file: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    loads = [r["load1"] for e in results.values() for r in e["runs"] if "load1" in r]
    caption = (
        f"1-min load average at run starts: {min(loads):g}-{max(loads):g} on "
        f"{os.cpu_count()} CPUs (anything else running skews the figures)"
        if loads
        else None
    )
    table = Table(
        title=f"Event channel benchmark: {s.store} store, {s.runs} run(s) each, median first",
        caption=caption,
    )
    table.add_column("measurement", style="bold")
    table.add_column("metric")
    table.add_column("median", justify="right")
    table.add_column("runs", justify="right")
    table.add_column("target", justify="right")
    table.add_column("", justify="center")
    for name, entry in results.items():
        if not entry["runs"]:
            status = f"[red]failed: {entry['error']}[/red]" if "error" in entry else "interrupted"
            table.add_row(name, status, "-", "-", "", "", end_section=True)
            continue
        first = True
        for key, label, fmt in SHOWN[name]:
            median = entry["median"].get(key)
            runs = [r.get(key) for r in entry["runs"]]
            target = TARGETS.get((name, key))
            met = target.met(median) if target else None
            table.add_row(
                f"{name}\n[dim]{describe(name, s)}[/dim]" if first else "",
                label,
                "-" if median is None else format(median, fmt),
                "  ".join("-" if v is None else format(v, fmt) for v in runs),
                str(target) if target else "",
                "" if met is None else ("[green]✓[/green]" if met else "[red]✗[/red]"),
                end_section=key == SHOWN[name][-1][0],
            )
            first = False
        if entry.get("error"):
            table.add_row("", f"[red]error: {entry['error']}[/red]", "", "", "", "")
    Console(file=console_file, width=140).print(table)


# -- command line ------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/bench.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Targets: throughput ≥ 40,000 events/s; batch1 ≥ 1,500 events/s; "
        "latency p99 ≤ 10 ms at 1,000 events/s; memory ≤ 600 B per queued event.",
    )
    parser.add_argument(
        "--only",
        default=",".join(MEASUREMENTS),
        help=f"comma-separated subset of {','.join(MEASUREMENTS)} (default: all)",
    )
    parser.add_argument("--runs", type=_positive, default=3, help="repeats (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--subscribers", type=_positive, default=4, help="default 4")
    parser.add_argument("--partitions", type=_positive, default=16, help="default 16")
    parser.add_argument("--payload-size", type=int, default=100, help="bytes (default 100)")
    parser.add_argument("--prefetch", type=_positive, default=None, help="subscriber prefetch")
    parser.add_argument(
        "--events", type=_positive, default=100_000, help="throughput events (default 100000)"
    )
    parser.add_argument("--batch-size", type=_positive, default=100, help="default 100")
    parser.add_argument(
        "--batch1-events", type=_positive, default=5_000, help="batch-1 events (default 5000)"
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
        "--raw-events", type=_positive, default=200_000, help="raw Pyro5 events (default 200000)"
    )
    parser.add_argument("--raw-batch-size", type=_positive, default=100, help="default 100")
    parser.add_argument(
        "--memory-events",
        type=_positive,
        default=1_000_000,
        help="events queued for the memory measurement (default 1000000)",
    )
    parser.add_argument("--memory-batch-size", type=_positive, default=1_000, help="default 1000")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level of the broker (default WARNING)",
    )
    parser.add_argument(
        "--store",
        choices=["sqlite", "memory"],
        default="sqlite",
        help="broker store: sqlite (the service's default; a fresh data dir per run, "
        "deleted after it) or memory (default %(default)s)",
    )
    parser.add_argument(
        "--broker-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for 'channel_server serve' (repeatable), e.g. --broker-arg=--memory",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep process logs and subscriber summaries here (default: a temp dir, removed)",
    )
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter for the child processes"
    )
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    chosen = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(MEASUREMENTS))
    if unknown or not chosen:
        print(f"bench: --only: unknown {', '.join(unknown) or '(empty)'}", file=sys.stderr)
        return 2
    keep = args.workdir is not None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-"))
    settings = Settings(
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
        broker_args=args.broker_arg,
        workdir=workdir,
    )
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)  # also when started with SIGINT ignored
    results: dict[str, Any] = {}
    started = time.monotonic()
    interrupted = False
    try:
        for name in MEASUREMENTS:
            if name not in chosen:
                continue
            entry: dict[str, Any] = {"description": describe(name, settings), "runs": []}
            results[name] = entry
            for run in range(1, settings.runs + 1):
                log(f"{name} run {run}/{settings.runs}: {entry['description']}")
                try:
                    outcome = MEASURE[name](settings, run)
                except Exception as exc:  # one failed measurement does not stop the others
                    log(f"{name} run {run} failed: {type(exc).__name__}: {exc}")
                    entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                    break
                entry["runs"].append(outcome)
                log(f"{name} run {run}: {_brief(name, outcome)}")
            entry["median"] = summarize(entry["runs"]) if entry["runs"] else {}
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping the processes")
    finally:
        for group in list(ProcGroup._live):
            group.close()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - started
    for entry in results.values():
        entry.setdefault("median", summarize(entry["runs"]) if entry["runs"] else {})
    if results:
        render_table(results, settings, sys.stderr if args.json else sys.stdout)
    log(f"done in {elapsed:.0f} s" + (f"; logs kept in {workdir}" if keep else ""))
    if args.json:
        print(json.dumps(_json_report(results, settings, elapsed), indent=2))
    if interrupted:
        return 130
    return 1 if any("error" in e for e in results.values()) else 0


def _brief(name: str, outcome: dict[str, Any]) -> str:
    return ", ".join(
        f"{key}={outcome[key]}" for key, _, _ in SHOWN[name] if outcome.get(key) is not None
    )


def _json_report(results: dict[str, Any], s: Settings, elapsed: float) -> dict[str, Any]:
    targets = {}
    for (name, key), target in TARGETS.items():
        if name in results:
            measured = results[name]["median"].get(key)
            targets[f"{name}.{key}"] = {
                "target": f"{target.op} {target.value:g}",
                "median": measured,
                "met": target.met(measured),
            }
    config = {k: v for k, v in vars(s).items() if k not in ("workdir", "python")}
    return {"config": config, "seconds": round(elapsed, 1), "results": results, "targets": targets}


if __name__ == "__main__":
    sys.exit(main())
