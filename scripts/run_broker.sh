#!/usr/bin/env bash
# Run a broker: scripts/run_broker.sh --channel orders [--ns-port 9090] ... (see --help)
set -euo pipefail
# the project's venv, from wherever it is called (else the active one): relative paths
# stay the caller's
py="$(dirname "$0")/../.venv/bin/python"
[[ -x "$py" ]] || py="${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/}python3"
exec "$py" -m channel_server serve "$@"
