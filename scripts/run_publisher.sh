#!/usr/bin/env bash
# Publish events: scripts/run_publisher.sh --channel orders --id PUB --count 10 ... (see --help)
set -euo pipefail
# the project's venv, from wherever it is called: relative paths stay the caller's
exec "$(dirname "$0")/../.venv/bin/python" -m publisher publish "$@"
