#!/usr/bin/env bash
# Run a push subscriber: scripts/run_subscriber.sh --channel orders --id s1 ... (see --help)
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m subscriber run "$@"
