"""Running measurements, their medians and targets, the table and the JSON report.

A measurement is a function ``(settings, run) -> dict`` of figures. ``make_parser`` gives
a script the flags every bench script has; ``bench_main`` does the rest:
``run_measurements`` repeats each measurement, keeps going when one fails and stops every
child process at the end (also on Ctrl-C / SIGTERM); ``conclude`` prints the table (median
first, then every run, then the target) and the JSON report, and returns the exit code.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

from bench_support.procs import ProcGroup, log, raise_interrupt

Shown = Mapping[str, Sequence[tuple[str, str, str]]]
"""measurement -> [(metric key, label, format)]: what the table shows."""


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


Targets = Mapping[tuple[str, str], Target]


def percentile(sorted_values: list[float], p: float) -> float | None:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def positive(text: str) -> int:
    """argparse type: a whole number >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    medians: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        if values and not isinstance(runs[0][key], bool):
            medians[key] = statistics.median(values)
    return medians


def brief(shown: Shown, name: str, outcome: dict[str, Any]) -> str:
    return ", ".join(
        f"{key}={outcome[key]}" for key, _, _ in shown[name] if outcome.get(key) is not None
    )


def run_measurements(
    names: Sequence[str],
    runs: int,
    measure: Callable[[str, int], dict[str, Any]],
    describe: Callable[[str], str],
    shown: Shown,
) -> tuple[dict[str, Any], bool]:
    """Run each measurement ``runs`` times (fresh processes every run: the measure
    function's business); one that fails is recorded and the others go on. Returns the
    results (``{name: {"description", "runs", "median"[, "error"]}}``) and whether it was
    interrupted. Every process group still open is closed before returning."""
    signal.signal(signal.SIGTERM, raise_interrupt)
    signal.signal(signal.SIGINT, raise_interrupt)  # also when started with SIGINT ignored
    results: dict[str, Any] = {}
    interrupted = False
    try:
        for name in names:
            entry: dict[str, Any] = {"description": describe(name), "runs": []}
            results[name] = entry
            for run in range(1, runs + 1):
                log(f"{name} run {run}/{runs}: {entry['description']}")
                try:
                    outcome = measure(name, run)
                except Exception as exc:  # one failed measurement does not stop the others
                    log(f"{name} run {run} failed: {type(exc).__name__}: {exc}")
                    entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                    break
                entry["runs"].append(outcome)
                log(f"{name} run {run}: {brief(shown, name, outcome)}")
            entry["median"] = summarize(entry["runs"]) if entry["runs"] else {}
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping the processes")
    finally:
        ProcGroup.close_all()
    for entry in results.values():
        entry.setdefault("median", summarize(entry["runs"]) if entry["runs"] else {})
    return results, interrupted


def render_table(
    results: dict[str, Any],
    shown: Shown,
    targets: Targets,
    title: str,
    console_file: TextIO,
) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    loads = [r["load1"] for e in results.values() for r in e["runs"] if "load1" in r]
    caption = (
        f"1-min load average at run starts: {min(loads):g}-{max(loads):g} on "
        f"{os.cpu_count()} CPUs (anything else running skews the figures)"
        if loads
        else None
    )
    table = Table(title=title, caption=caption)
    table.add_column("measurement", style="bold")
    table.add_column("metric")
    table.add_column("median", justify="right")
    table.add_column("runs", justify="right")
    table.add_column("target", justify="right")
    table.add_column("", justify="center")
    for name, entry in results.items():
        if not entry["runs"]:
            status = (
                f"[red]failed: {escape(entry['error'])}[/red]"
                if "error" in entry
                else "interrupted"
            )
            table.add_row(name, status, "-", "-", "", "", end_section=True)
            continue
        first = True
        for key, label, fmt in shown[name]:
            median = entry["median"].get(key)
            runs = [r.get(key) for r in entry["runs"]]
            target = targets.get((name, key))
            met = target.met(median) if target else None
            table.add_row(
                f"{name}\n[dim]{entry['description']}[/dim]" if first else "",
                label,
                "-" if median is None else format(median, fmt),
                "  ".join("-" if v is None else format(v, fmt) for v in runs),
                str(target) if target else "",
                "" if met is None else ("[green]✓[/green]" if met else "[red]✗[/red]"),
                end_section=key == shown[name][-1][0],
            )
            first = False
        if entry.get("error"):
            table.add_row("", f"[red]error: {escape(entry['error'])}[/red]", "", "", "", "")
    Console(file=console_file, width=140).print(table)


def json_report(
    results: dict[str, Any], targets: Targets, config: dict[str, Any], elapsed: float
) -> dict[str, Any]:
    checked = {}
    for (name, key), target in targets.items():
        if name in results:
            measured = results[name]["median"].get(key)
            checked[f"{name}.{key}"] = {
                "target": f"{target.op} {target.value:g}",
                "median": measured,
                "met": target.met(measured),
            }
    return {"config": config, "seconds": round(elapsed, 1), "results": results, "targets": checked}


def conclude(
    results: dict[str, Any],
    *,
    shown: Shown,
    targets: Targets,
    title: str,
    config: dict[str, Any],
    elapsed: float,
    interrupted: bool,
    as_json: bool,
    kept_in: str | None = None,
) -> int:
    """Print the table (on stderr with ``as_json``, which prints the JSON report on
    stdout); returns the exit code: 130 interrupted, 1 a measurement failed, else 0."""
    if results:
        render_table(results, shown, targets, title, sys.stderr if as_json else sys.stdout)
    log(f"done in {elapsed:.0f} s" + (f"; logs kept in {kept_in}" if kept_in else ""))
    if as_json:
        print(json.dumps(json_report(results, targets, config, elapsed), indent=2))
    if interrupted:
        return 130
    return 1 if any("error" in e for e in results.values()) else 0


def make_parser(
    prog: str, description: str | None, epilog: str, measurements: Sequence[str]
) -> argparse.ArgumentParser:
    """A bench script's parser with the flags they all have: --only, --runs, --json,
    --log-level, --workdir, --python."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=epilog,
    )
    parser.add_argument(
        "--only",
        default=",".join(measurements),
        help=f"comma-separated subset of {','.join(measurements)} (default: all)",
    )
    parser.add_argument("--runs", type=positive, default=3, help="repeats (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level of the broker (default WARNING)",
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


def add_store_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        choices=["sqlite", "memory"],
        default="sqlite",
        help="broker store: sqlite (the service's default; a fresh data dir per run, "
        "deleted after it) or memory (default %(default)s)",
    )


S = TypeVar("S")


def bench_main(
    args: argparse.Namespace,
    *,
    prog: str,
    build: Callable[[Path], S],
    measure: Mapping[str, Callable[[S, int], dict[str, Any]]],
    describe: Callable[[str, S], str],
    shown: Shown,
    targets: Targets,
    title: str,
    hidden: Sequence[str] = (),
    cleanup: Callable[[S], None] | None = None,
) -> int:
    """The whole of a bench script after parsing (``make_parser``): check --only, make the
    work directory, build the settings, run the chosen measurements (in ``measure``'s
    order), clean up (``cleanup``, then the directory unless --workdir), print the table
    and the JSON report. Returns the exit code (2: a bad --only)."""
    chosen = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(measure))
    if unknown or not chosen:
        print(f"{prog}: --only: unknown {', '.join(unknown) or '(empty)'}", file=sys.stderr)
        return 2
    keep = args.workdir is not None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"{prog}-"))
    settings = build(workdir)
    started = time.monotonic()
    try:
        results, interrupted = run_measurements(
            [name for name in measure if name in chosen],
            args.runs,
            lambda name, run: measure[name](settings, run),
            lambda name: describe(name, settings),
            shown,
        )
    finally:
        if cleanup is not None:
            cleanup(settings)
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    left_out = {"workdir", "python", *hidden}
    return conclude(
        results,
        shown=shown,
        targets=targets,
        title=title,
        config={k: v for k, v in vars(settings).items() if k not in left_out},
        elapsed=time.monotonic() - started,
        interrupted=interrupted,
        as_json=args.json,
        kept_in=str(workdir) if keep else None,
    )
