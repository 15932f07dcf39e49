#!/usr/bin/env python
"""Benchmark the Spark plan against the pure-Python reference; prints a table.

For each size (default 100k, 300k and 1M events) and format it generates a batch in a temp
directory, then plans it with each engine in a fresh process through the CLI, so the Spark
time includes starting the JVM and the session. It checks the two plan.json files are
identical, reports the crossover (measured, and extrapolated linearly when Spark never
wins), and compares the skew of the LPT plan with an online least-loaded assignment of the
same blocks taken in order of their first timestamp (what the broker would do when they
arrive), using the broker's own ``least_loaded``.

Run it with the project's venv:  .venv/bin/python scripts/bench_spark.py  (see --help).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from channel_server.core.assignment import least_loaded
from spark_partitions.config import PlanConfig
from spark_partitions.formats import Format
from spark_partitions.generate import GenerateConfig, generate
from spark_partitions.plan import skew
from spark_partitions.reference import run_reference

DEFAULT_SIZES = "100000,300000,1000000"
DEFAULT_FORMATS = "jsonl,parquet"
ENGINES = ("reference", "spark")
PLAN_TIMEOUT_S = 1800
SKEW_ROWS = 100_000
SKEW_PUBLISHERS = 20
SKEW_ZIPF = 1.2
SKEW_SUBSCRIBERS = (4, 8)


@dataclass(frozen=True, slots=True)
class Run:
    rows: int
    fmt: str
    engine: str
    seconds: float
    plan: dict

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated row counts")
    parser.add_argument("--formats", default=DEFAULT_FORMATS, help="jsonl, csv, parquet")
    parser.add_argument("--subscribers", type=int, default=4, help="slots (default 4)")
    parser.add_argument("--publishers", type=int, default=50, help="default 50")
    parser.add_argument("--partitions", type=int, default=10, help="per publisher, default 10")
    parser.add_argument("--payload-size", type=int, default=100, help="default 100")
    parser.add_argument("--duplicates", type=float, default=0.01, help="default 0.01")
    parser.add_argument("--invalid", type=float, default=0.001, help="default 0.001")
    parser.add_argument("--driver-memory", help="passed to the Spark runs, e.g. 2g")
    parser.add_argument("--workdir", help="keep batches and outputs here (default: temp)")
    return parser.parse_args(argv)


def plan(engine: str, source: Path, out: Path, args: argparse.Namespace) -> tuple[float, dict]:
    """Wall time of one fresh ``python -m spark_partitions plan`` process, and its plan."""
    command = [
        sys.executable, "-m", "spark_partitions", "plan", str(source),
        "--subscribers", str(args.subscribers), "--out", str(out), "--engine", engine, "--json",
    ]  # fmt: skip
    if engine == "spark" and args.driver_memory:
        command += ["--driver-memory", args.driver_memory]
    started = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=PLAN_TIMEOUT_S, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        raise SystemExit(f"{engine} plan of {source} failed: {lines[-1]}")
    return seconds, json.loads((out / "plan.json").read_text())


def online_skew(plan_doc: dict) -> float:
    """Skew of the broker's online policy: blocks by first timestamp onto least-loaded."""
    width = len(str(plan_doc["subscribers"]))
    loads = {f"slot-{n:0{width}d}": 0 for n in range(plan_doc["subscribers"])}
    for block in sorted(plan_doc["blocks"], key=lambda b: b["first_timestamp"]):
        loads[least_loaded(loads)] += block["count"]
    return skew(list(loads.values()))


def crossover(runs: list[Run], fmt: str) -> str:
    """Smallest measured size where Spark wins, else a linear extrapolation."""
    by_engine = {e: sorted((r for r in runs if r.fmt == fmt and r.engine == e),
                           key=lambda r: r.rows) for e in ENGINES}  # fmt: skip
    pairs = list(zip(by_engine["reference"], by_engine["spark"], strict=True))
    for ref, spark in pairs:
        if spark.seconds < ref.seconds:
            return f"{fmt}: Spark is faster from {ref.rows:,} rows (measured)"
    if len(pairs) < 2:
        return f"{fmt}: Spark never faster in the sizes measured"
    (r0, s0), (r1, s1) = pairs[0], pairs[-1]
    ref_slope = (r1.seconds - r0.seconds) / (r1.rows - r0.rows)
    spark_slope = (s1.seconds - s0.seconds) / (s1.rows - s0.rows)
    if ref_slope <= spark_slope:
        return f"{fmt}: Spark never faster (its per-row cost is not lower here)"
    gap = (s0.seconds - r0.seconds) / (ref_slope - spark_slope)
    return f"{fmt}: Spark would be faster from about {r0.rows + gap:,.0f} rows (extrapolated)"


def print_table(runs: list[Run]) -> None:
    print(f"{'rows':>10}  {'format':<8} {'engine':<10} {'seconds':>8} {'events/s':>10}")
    for run in runs:
        print(
            f"{run.rows:>10,}  {run.fmt:<8} {run.engine:<10} {run.seconds:>8.1f} {run.rate:>10,.0f}"
        )


def print_skews(runs: list[Run]) -> None:
    print(f"\n{'rows':>10}  {'format':<8} {'blocks':>6} {'LPT skew':>9} {'online skew':>12}")
    for run in runs:
        if run.engine == "spark":
            doc = run.plan
            print(
                f"{run.rows:>10,}  {run.fmt:<8} {len(doc['blocks']):>6} {doc['skew']:>9.6f} "
                f"{online_skew(doc):>12.6f}"
            )


def skewed_scenarios(root: Path, args: argparse.Namespace) -> None:
    """LPT against online least-loaded where it matters: few blocks of very uneven size."""
    print(f"\n{'scenario':<52} {'blocks':>6} {'LPT skew':>9} {'online skew':>12}")
    for subscribers in SKEW_SUBSCRIBERS:
        config = GenerateConfig(count=SKEW_ROWS, publishers=SKEW_PUBLISHERS, partitions=2,
                                zipf=SKEW_ZIPF, payload_size=args.payload_size)  # fmt: skip
        source = generate(root / "skewed.parquet", config)
        outcome = run_reference(str(source), Format.PARQUET, str(root / "skewed"),
                                PlanConfig(subscribers))  # fmt: skip
        doc = outcome.plan.to_json()
        name = (f"{SKEW_ROWS:,} rows, {SKEW_PUBLISHERS} publishers (zipf {SKEW_ZIPF}) "
                f"x 2, {subscribers} slots")  # fmt: skip
        print(f"{name:<52} {len(doc['blocks']):>6} {doc['skew']:>9.6f} {online_skew(doc):>12.6f}")


def bench(args: argparse.Namespace, root: Path) -> list[Run]:
    runs = []
    for fmt in args.formats.split(","):
        for rows in (int(size) for size in args.sizes.split(",")):
            source = root / f"batch-{rows}.{fmt}"
            config = GenerateConfig(
                count=rows,
                publishers=args.publishers,
                partitions=args.partitions,
                payload_size=args.payload_size,
                duplicates=args.duplicates,
                invalid=args.invalid,
            )
            generate(source, config)
            plans = {}
            for engine in ENGINES:
                seconds, plans[engine] = plan(engine, source, root / f"{fmt}-{rows}-{engine}", args)
                runs.append(Run(rows, fmt, engine, seconds, plans[engine]))
                print(f"  {rows:,} {fmt} {engine}: {seconds:.1f} s", file=sys.stderr, flush=True)
            if plans["spark"] != plans["reference"]:
                raise SystemExit(f"the engines disagree on {source}")
            source.unlink()
    return runs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench-spark-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        runs = bench(args, root)
        print_table(runs)
        print("\nCrossover (wall time including start-up; plans identical for every run):")
        for fmt in args.formats.split(","):
            print("  " + crossover(runs, fmt))
        print_skews(runs)
        skewed_scenarios(root, args)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
