#!/usr/bin/env bash
# The long hostile-input run against real processes on 127.0.0.1: the Hypothesis fuzz of
# every RPC method with $PUBSUB_HOSTILE_CALLS calls (default here 10000; CI runs 400), raw
# frames, the idle-socket, oneway and subscriber floods. Prints one row per attack: calls
# made, refusals by type, untyped errors, crashes, RSS and threads before / at peak / after,
# and how long a normal client took to get through.
# Usage: scripts/hostile.sh [PYTEST ARGS]    e.g. scripts/hostile.sh -k fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/compile.sh dev
export PUBSUB_HOSTILE_CALLS="${PUBSUB_HOSTILE_CALLS:-10000}"
exec .venv/bin/python -m pytest -q -p no:cacheprovider -m hostile tests/hostile "$@"
