#!/usr/bin/env bash
# Publish events: scripts/run_publisher.sh --channel orders --id PUB --count 10 ... (see --help)
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m publisher publish "$@"
