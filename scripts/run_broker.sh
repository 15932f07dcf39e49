#!/usr/bin/env bash
# Run a broker: scripts/run_broker.sh --channel orders [--ns-port 9090] ... (see --help)
set -euo pipefail
# the project's venv, from wherever it is called: relative paths stay the caller's
exec "$(dirname "$0")/../.venv/bin/python" -m channel_server serve "$@"
