#!/usr/bin/env python
"""The service against Redis Streams on the same workload, side by side in one run (issue 16).

Pairs alternate: the service's own benchmark (``scripts/bench.py``, one run), then the peer
(``../shared/peers/redis_bench.py``, one run: Redis Streams with a consumer group, AOF
everysec, driven from redis-py), then the next pair; the figure is the median of the
per-pair ratios, since this machine's speed drifts by a third within minutes.

Workloads:
  batched  service: 100,000 x 100 B in batches of 100, 16 partitions, 4 subscribers (SQLite,
           the default store; then the memory store) / Redis: XADD pipelines of 100,
           XREADGROUP COUNT 100, 4 consumers
  submitted  service: the batched events given to ``Publisher.submit`` 100 at a time (its
           sender thread sends what queued up during a round trip as one batch, up to
           1,000 events) / Redis: as batched
  batch1   service: batches of 1 / Redis: one XADD per round trip, COUNT 1
  submit1  service: one event per ``Publisher.submit`` call (its sender thread sends what
           queues up during a round trip as one batch) / Redis: as batch1. Not the same
           wire shape: what a caller with one event at a time gets from each

Needs redis-server and redis-py (``scripts/peer_deps.sh`` installs both).

  .venv/bin/python scripts/bench_peer.py --pairs 5
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {
    "batched/sqlite": 2.0,
    "batched/memory": 3.0,
    "submitted/sqlite": 2.0,
    "submitted/memory": 3.0,
    "batch1/sqlite": 1.0,
    "submit1/sqlite": 1.0,
}
"""Issue 16's targets: the service's throughput over Redis's, per workload (submit1 has
batch1's: the same caller, one event per call; submitted has batched's)."""
MEASUREMENT = {"batched": "throughput", "submitted": "throughput", "batch1": "batch1"}
"""scripts/bench.py's measurement of each workload (submit1 is batch1 with ``--submit``)."""


def service(python: str, workload: str, store: str, events: int) -> float:
    only = MEASUREMENT.get(workload, "batch1")
    count_flag = "--events" if only == "throughput" else "--batch1-events"
    argv = [python, str(ROOT / "scripts/bench.py"), "--only", only, "--runs", "1", "--json"]
    argv += ["--store", store, count_flag, str(events)]
    argv += ["--submit"] if workload.startswith("submit") else []
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    report = json.loads(done.stdout)
    return float(report["results"][only]["median"]["events_per_s"])


def redis(python: str, peers: Path, workload: str, events: int, workdir: Path) -> float:
    mode = "pipeline" if workload in ("batched", "submitted") else "single"
    argv = [python, str(peers / "redis_bench.py"), "--mode", mode, "--fsync", "everysec"]
    argv += ["--repeats", "1", "--n", str(events)]
    env = {"PEERS_RESULTS": str(workdir), "PATH": "/usr/local/bin:/usr/bin:/bin"}
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=workdir, env=env)
    found = re.search(r"^throughput ([\d,.]+)", done.stdout, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no throughput line from redis_bench.py: {done.stdout[-500:]}")
    return float(found.group(1).replace(",", ""))


def workloads(text: str) -> list[str]:
    """``--only``'s names, each one of TARGETS (a workload and its store)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in TARGETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload {', '.join(unknown) or repr(text)}; choose from {', '.join(TARGETS)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5, help="service/Redis pairs (5)")
    parser.add_argument("--peers-dir", type=Path, default=ROOT.parent / "shared" / "peers")
    parser.add_argument("--python", default=sys.executable, help="the service's interpreter")
    parser.add_argument("--redis-python", default=sys.executable, help="with redis-py")
    parser.add_argument("--events", type=int, default=100_000, help="batched events")
    parser.add_argument("--batch1-events", type=int, default=5_000, help="batch-1 events")
    parser.add_argument("--submit1-events", type=int, default=20_000, help="submit1 events")
    parser.add_argument(
        "--only",
        type=workloads,
        default=list(TARGETS),
        help=f"comma-separated workloads (default all: {','.join(TARGETS)})",
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-peer"))
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.only:
        workload, store = name.split("/")
        events = {"batch1": args.batch1_events, "submit1": args.submit1_events}.get(
            workload, args.events
        )
        ratios = []
        for pair in range(1, args.pairs + 1):
            ours = service(args.python, workload, store, events)
            theirs = redis(args.redis_python, args.peers_dir, workload, events, args.workdir)
            ratios.append(ours / theirs)
            print(
                f"{name} pair {pair}: service {ours:,.0f} ev/s, Redis {theirs:,.0f} msg/s, "
                f"ratio {ours / theirs:.2f}",
                flush=True,
            )
        rows.append((name, statistics.median(ratios), min(ratios), max(ratios)))
    print("\n| workload | service / Redis (median of pairs) | spread | target | met |")
    print("|---|---|---|---|---|")
    for name, median, low, high in rows:
        target = TARGETS[name]
        met = "yes" if median >= target else "no"
        print(f"| {name} | {median:.2f}x | {low:.2f}-{high:.2f} | >= {target:g}x | {met} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
