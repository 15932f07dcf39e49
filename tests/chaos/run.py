"""``python -m tests.chaos.run``: N chaos runs with seeds S, S+1, ...; one row per run as it
ends (so a long session shows progress), a totals line, exit code 1 if any run failed."""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

from tests.chaos.harness import PARTITIONS, RunResult, run_once

SHORT = {
    "sub-kill": "kill",
    "sub-stop": "stop",
    "sub-term": "term",
    "broker-kill": "bkill",
    "drop-acks": "drop",
    "crash-after": "crash",
    "broker-clock": "clock",
    "broker-stop": "bstop",
    "sub-takeover": "take",
}
ROW = "{:>8}  {:<34} {:>6} {:>7} {:>9} {:>5} {:>5} {:<12} {:>6}  {}"
HEADER = ROW.format(
    "seed", "faults fired", "events", "records", "dup ok/x", "lost", "order", "inactive",
    "secs", "result",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos.run",
        description="Randomized fault runs against real processes; a failed run keeps its "
        "tmp dir and replays with --seed.",
    )
    parser.add_argument("--runs", type=int, default=1, help="runs (default %(default)s)")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    parser.add_argument(
        "--events", type=int, default=1000, help="events per publisher (default %(default)s)"
    )
    parser.add_argument(
        "--stream-seconds",
        type=float,
        default=12.0,
        help="how long the publishers' paced stream lasts (default %(default)s)",
    )
    parser.add_argument(
        "--broker-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="a flag added to every start of the broker, e.g. --broker-arg=--payload-memory=0 "
        "(repeatable)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=PARTITIONS,
        help="partitions of each publisher (default %(default)s; thousands make most hold "
        "a few events)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the tmp dir of passed runs too")
    parser.add_argument("--workdir", type=Path, default=None, help="where tmp dirs go")
    parser.add_argument("--verbose", action="store_true", help="print the nemesis as it fires")
    return parser


def row(result: RunResult) -> str:
    report = result.report
    fired = " ".join(f"{SHORT[k]}{n}" for k, n in sorted(report.totals.faults.items())) or "-"
    unexplained = len(report.unexplained)
    return ROW.format(
        result.seed,
        fired,
        report.totals.events,
        report.totals.records,
        f"{report.totals.duplicates - unexplained}/{unexplained}",
        len(report.lost),
        len(report.order_violations),
        ",".join(report.inactive_alive) or "-",
        f"{result.seconds:.0f}",
        "pass" if result.ok else "FAIL",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    print(f"chaos: {args.runs} run(s) from seed {first}", flush=True)
    say = (lambda line: print(line, flush=True)) if args.verbose else (lambda _: None)
    print(HEADER, flush=True)
    results: list[RunResult] = []
    broken: list[int] = []
    for seed in range(first, first + args.runs):
        try:
            result = run_once(
                seed,
                args.events,
                args.stream_seconds,
                args.workdir,
                args.keep,
                say,
                tuple(args.broker_arg),
                args.partitions,
            )
        except RuntimeError as exc:
            broken.append(seed)
            print(f"{seed:>8}  the run broke: {exc}", flush=True)
            continue
        results.append(result)
        print(row(result), flush=True)
        if not result.ok:
            print("    " + result.failure_message().replace("\n", "\n    "), flush=True)
    print(totals(results, broken))
    return 1 if broken or not all(r.ok for r in results) else 0


def totals(results: list[RunResult], broken: list[int]) -> str:
    """One line over all runs; ``broken`` are the seeds whose run itself broke."""
    failed = sorted([r.seed for r in results if not r.ok] + broken)
    faults: Counter[str] = Counter()
    for r in results:
        faults.update(r.report.totals.faults)
    reports = [r.report for r in results]
    duplicates = sum(r.totals.duplicates for r in reports)
    unexplained = sum(len(r.unexplained) for r in reports)
    fired = " ".join(f"{k}={n}" for k, n in sorted(faults.items())) or "none"
    return (
        f"total: {len(results) + len(broken)} runs, {len(failed)} failed {failed}; "
        f"faults {fired}; "
        f"events {sum(r.totals.events for r in reports)}, "
        f"records {sum(r.totals.records for r in reports)}, duplicates {duplicates} "
        f"({unexplained} unexplained), lost {sum(len(r.lost) for r in reports)}, "
        f"reordered {sum(len(r.order_violations) for r in reports)}, "
        f"inactive-alive {sum(len(r.inactive_alive) for r in reports)}, "
        f"{sum(r.seconds for r in results):.0f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
