#!/usr/bin/env bash
# Run a push subscriber: scripts/run_subscriber.sh --channel orders --id s1 ... (see --help)
set -euo pipefail
# the project's venv, from wherever it is called: relative paths stay the caller's
exec "$(dirname "$0")/../.venv/bin/python" -m subscriber run "$@"
