#!/usr/bin/env python
"""Benchmark durable publishing into the PostgreSQL store against the SQLite store, in the
same run (issue 18), at the store: what ``publish`` waits for before it returns.

Measurements (pick with ``--only``; each repeated ``--runs`` times, the stores alternating
which goes first):

  batched  ``--events`` events of ``--payload-size`` B appended in batches of
           ``--batch-size`` (one transaction each: the group commit), into a fresh
           channel of a fresh store: PostgreSQL (a new database on a throwaway server
           from tests/pgcluster.py, fsync on, synchronous_commit on, over TCP on
           127.0.0.1), SQLite with synchronous=NORMAL (the service's default: survives a
           process crash) and SQLite FULL (survives power loss, as PostgreSQL does).
           Figure: events/s of each; PostgreSQL as a % of SQLite NORMAL and FULL
  single   the same with one event per transaction (``--single-events``): the cost of a
           commit
  service  the service end to end: bench.py's throughput workload (broker + 4 bench
           subscribers, ``--service-events`` events in batches of ``--batch-size``; events/s
           from the first publish to the last ack) with ``--store postgresql://`` (a fresh
           database) and with SQLite (a fresh ``--data-dir``), back to back, alternating

The PostgreSQL writes are fenced (each transaction first checks the channel's lease FOR
SHARE), as in service. Run it with the project's venv (psycopg and Debian's postgresql
installed: scripts/postgres_deps.sh):  .venv/bin/python scripts/bench_pg.py  (see --help).
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_support.procs import ROOT
from bench_support.report import Target, bench_main, make_parser, positive

sys.path.insert(0, str(ROOT))  # measure the checkout this script is in, whatever is installed

from channel_server.events import Event
from channel_server.store.base import ChannelRecord, Store
from channel_server.store.postgres import PostgresStore
from channel_server.store.sqlite import SQLiteStore
from tests.pgcluster import PgCluster, start_cluster

MEASUREMENTS = ("batched", "single", "service")
STORES = ("postgresql", "sqlite", "sqlite_full")
CHANNEL = "bench"
PARTITIONS = 16


@dataclass
class PgSettings:
    runs: int
    events: int
    single_events: int
    batch_size: int
    payload_size: int
    service_events: int
    python: str
    workdir: Path = field(default_factory=Path)
    cluster: PgCluster | None = None


def events(count: int, payload_size: int) -> list[Event]:
    payload = "x" * payload_size
    return [
        Event(f"e-{i}", "bench", i % PARTITIONS, float(i), payload, i, payload_size + 8)
        for i in range(count)
    ]


def open_store(ss: PgSettings, kind: str, run: int) -> Store:
    if kind == "postgresql":
        if ss.cluster is None:
            ss.cluster = start_cluster()  # its own temp dir: the server's user must reach it
        dsn = ss.cluster.create_database(f"bench_{run}_{secrets.token_hex(4)}")
        return PostgresStore(dsn, "bench-broker")
    sync = "FULL" if kind == "sqlite_full" else "NORMAL"
    return SQLiteStore(ss.workdir / f"{kind}-{run}-{secrets.token_hex(4)}", sync)


def append_rate(store: Store, batch: list[Event], batch_size: int) -> float:
    """Events/s appending ``batch`` in transactions of ``batch_size`` events."""
    store.save_channel(ChannelRecord(CHANNEL, "queue"))
    started = time.perf_counter()
    for first in range(0, len(batch), batch_size):
        part = batch[first : first + batch_size]
        store.append(CHANNEL, part, part[-1].offset + 1, time.time())
    elapsed = time.perf_counter() - started
    if store.count(CHANNEL) != len(batch):
        raise RuntimeError(f"{store.count(CHANNEL)} events stored, not {len(batch)}")
    return len(batch) / elapsed


def compare(ss: PgSettings, run: int, count: int, batch_size: int) -> dict[str, Any]:
    batch = events(count, ss.payload_size)
    order = STORES if run % 2 else tuple(reversed(STORES))
    rate: dict[str, float] = {}
    for kind in order:
        store = open_store(ss, kind, run)
        try:
            rate[kind] = append_rate(store, batch, batch_size)
        finally:
            store.close()
    pg = rate["postgresql"]
    return {
        "postgresql_events_per_s": round(pg, 1),
        "sqlite_events_per_s": round(rate["sqlite"], 1),
        "sqlite_full_events_per_s": round(rate["sqlite_full"], 1),
        "pg_vs_sqlite_pct": round(100 * pg / rate["sqlite"], 1),
        "pg_vs_sqlite_full_pct": round(100 * pg / rate["sqlite_full"], 1),
        "first": order[0],
    }


def measure_batched(ss: PgSettings, run: int) -> dict[str, Any]:
    return compare(ss, run, ss.events, ss.batch_size)


def measure_single(ss: PgSettings, run: int) -> dict[str, Any]:
    return compare(ss, run, ss.single_events, 1)


def measure_service(ss: PgSettings, run: int) -> dict[str, Any]:
    """bench.py's throughput measurement with each store, back to back."""
    import bench

    argv = ["--events", str(ss.service_events), "--batch-size", str(ss.batch_size)]
    argv += ["--payload-size", str(ss.payload_size), "--python", ss.python]
    outcome: dict[str, dict[str, Any]] = {}
    for kind in ("postgresql", "sqlite") if run % 2 else ("sqlite", "postgresql"):
        settings = bench.settings_from_args(bench.build_parser().parse_args(argv), ss.workdir)
        settings.workdir = ss.workdir / f"service-{kind}-{run}"
        if kind == "postgresql":
            if ss.cluster is None:
                ss.cluster = start_cluster()
            settings.store = ss.cluster.create_database(f"service_{run}_{secrets.token_hex(4)}")
        outcome[kind] = bench.measure_throughput(settings, run)
    pg, sqlite = outcome["postgresql"], outcome["sqlite"]
    return {
        "postgresql_events_per_s": pg["events_per_s"],
        "sqlite_events_per_s": sqlite["events_per_s"],
        "pg_vs_sqlite_pct": round(100 * pg["events_per_s"] / sqlite["events_per_s"], 1),
        "postgresql_p99_ms": pg["p99_ms"],
        "sqlite_p99_ms": sqlite["p99_ms"],
    }


ROWS = [
    ("postgresql_events_per_s", "events/s, PostgreSQL", ",.0f"),
    ("sqlite_events_per_s", "events/s, SQLite (synchronous=NORMAL)", ",.0f"),
    ("sqlite_full_events_per_s", "events/s, SQLite (synchronous=FULL)", ",.0f"),
    ("pg_vs_sqlite_pct", "PostgreSQL / SQLite NORMAL (%)", ".1f"),
    ("pg_vs_sqlite_full_pct", "PostgreSQL / SQLite FULL (%)", ".1f"),
]
SHOWN = {
    "batched": ROWS,
    "single": ROWS,
    "service": [
        ("postgresql_events_per_s", "events/s, --store postgresql://", ",.0f"),
        ("sqlite_events_per_s", "events/s, SQLite (--data-dir)", ",.0f"),
        ("pg_vs_sqlite_pct", "PostgreSQL / SQLite (%)", ".1f"),
        ("postgresql_p99_ms", "latency p99 (ms), PostgreSQL", ".1f"),
        ("sqlite_p99_ms", "latency p99 (ms), SQLite", ".1f"),
    ],
}
TARGETS: dict[tuple[str, str], Target] = {}
MEASURE: dict[str, Callable[[PgSettings, int], dict[str, Any]]] = {
    "batched": measure_batched,
    "single": measure_single,
    "service": measure_service,
}


def describe(name: str, ss: PgSettings) -> str:
    if name == "service":
        events = f"{ss.service_events:,} x {ss.payload_size} B"
        return f"bench.py throughput: {events}, batch {ss.batch_size}"
    if name == "batched":
        return f"{ss.events:,} x {ss.payload_size} B appended in batches of {ss.batch_size}"
    return f"{ss.single_events:,} x {ss.payload_size} B appended one per transaction"


def stop_cluster(ss: PgSettings) -> None:
    if ss.cluster is not None:
        ss.cluster.stop()
        shutil.rmtree(ss.cluster.root, ignore_errors=True)


def settings(args: argparse.Namespace, workdir: Path) -> PgSettings:
    return PgSettings(
        args.runs, args.events, args.single_events, args.batch_size, args.payload_size,
        args.service_events, args.python, workdir,
    )  # fmt: skip


def main() -> int:
    parser = make_parser("scripts/bench_pg.py", __doc__, "No targets: figures only.", MEASUREMENTS)
    parser.set_defaults(runs=5)
    parser.add_argument("--events", type=positive, default=20_000, help="default 20000")
    parser.add_argument("--single-events", type=positive, default=1_000, help="default 1000")
    parser.add_argument("--batch-size", type=positive, default=100, help="default 100")
    parser.add_argument("--service-events", type=positive, default=20_000, help="default 20000")
    parser.add_argument("--payload-size", type=positive, default=100, help="default 100")
    args = parser.parse_args()
    return bench_main(
        args,
        prog="bench_pg",
        build=lambda workdir: settings(args, workdir),
        measure=MEASURE,
        describe=describe,
        shown=SHOWN,
        targets=TARGETS,
        title=f"PostgreSQL vs SQLite store: {args.runs} run(s) each, median first",
        hidden=("cluster", "python"),
        cleanup=stop_cluster,
    )


if __name__ == "__main__":
    sys.exit(main())
