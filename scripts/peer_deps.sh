#!/usr/bin/env bash
# The peer of the side-by-side benchmark (scripts/bench_peer.py): Debian's redis-server
# (apt, as root, when missing; the benchmark starts its own on a free port) and redis-py in
# the project's venv. Not needed by the tests or CI.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "error: redis-server is missing; install it with: sudo apt-get install redis-server" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
.venv/bin/python -m pip install -q --disable-pip-version-check "redis>=5"
