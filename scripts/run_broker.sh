#!/usr/bin/env bash
# Run a broker: scripts/run_broker.sh --channel orders [--ns-port 9090] ... (see --help)
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m channel_server serve "$@"
