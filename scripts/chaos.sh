#!/usr/bin/env bash
# Randomized fault runs (Jepsen-style) against real processes on 127.0.0.1.
# Usage: scripts/chaos.sh [--runs N] [--seed S] [--events N] [--partitions P] [--keep] [--verbose]
# Runs seeds S, S+1, ... (default S: random, printed); one row per run, a totals line;
# exit code 1 if any run failed. A failed run keeps its tmp dir; --seed S replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/compile.sh dev
exec .venv/bin/python -m tests.chaos.run "$@"
