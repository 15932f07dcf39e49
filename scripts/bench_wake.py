#!/usr/bin/env python
"""What waking a sleeping thread costs on this machine (why a caller may wait for a quick
reply awake: docs/operations.md, "A caller waits for quick replies awake").

Two threads of this process hand a turn back and forth through two semaphores, each
sleeping until the other wakes it:

  any CPU   the OS places them (on an idle machine, on two CPUs: each wake reaches a CPU
            that may have halted)
  one CPU   both pinned to one CPU (a wake is a switch on that CPU; Linux only)

Prints the round trip and the CPU it took, the median of ``--runs`` runs, and the VM's
guest halt polling (``guest_halt_poll_ns``; 0: an idle CPU halts at once) where there is
one. Run it with the project's venv:  .venv/bin/python scripts/bench_wake.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

HALT_POLL = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
HAND_OFF_WAIT_S = 10.0
"""The longest one hand-off may take before the run is given up (a stopped process)."""


def hand_offs(rounds: int) -> tuple[float, float]:
    """Wall and CPU seconds per round of ``rounds`` hand-offs there and back."""
    there, back = threading.Semaphore(0), threading.Semaphore(0)

    def answer() -> None:
        for _ in range(rounds):
            if not there.acquire(timeout=HAND_OFF_WAIT_S):
                return
            back.release()

    other = threading.Thread(target=answer, name="bench-wake-answer", daemon=True)
    other.start()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        there.release()
        if not back.acquire(timeout=HAND_OFF_WAIT_S):
            raise RuntimeError("the other thread stopped answering")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    other.join(HAND_OFF_WAIT_S)
    return wall / rounds, cpu / rounds


def pinned_hand_offs(rounds: int) -> tuple[float, float] | None:
    """The same with the process on one CPU (None where it cannot be pinned)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # threads started now inherit it
    try:
        return hand_offs(rounds)
    finally:
        os.sched_setaffinity(0, allowed)


def halt_polling() -> str:
    try:
        return f"{int(HALT_POLL.read_text())} ns"
    except (OSError, ValueError):
        return "none (not a KVM guest with the haltpoll driver)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_wake", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000, help="per run (default 20000)")
    parser.add_argument("--runs", type=int, default=3, help="per row (default 3)")
    args = parser.parse_args(argv)
    rows: dict[str, list[tuple[float, float]]] = {"any CPU": [], "one CPU": []}
    for _ in range(args.runs):  # the rows alternate within each run (drift)
        rows["any CPU"].append(hand_offs(args.rounds))
        if (pinned := pinned_hand_offs(args.rounds)) is not None:
            rows["one CPU"].append(pinned)
    print(f"thread hand-offs there and back, {args.rounds:,} rounds, median of {args.runs} runs")
    print(f"guest halt polling: {halt_polling()}\n")
    print("| placement | µs per round | CPU µs per round |")
    print("|---|---|---|")
    for placement, runs in rows.items():
        if runs:
            wall = statistics.median(r[0] for r in runs) * 1e6
            cpu = statistics.median(r[1] for r in runs) * 1e6
            print(f"| {placement} | {wall:,.1f} | {cpu:,.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
