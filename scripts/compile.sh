#!/usr/bin/env bash
# Create the virtual environment (.venv) and install the project with the given extras.
# Usage: scripts/compile.sh [EXTRAS]   EXTRAS is a comma list: dev,spark (default) or "".
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1-dev,spark}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
echo "installing $spec into .venv (log: .venv/install.log)"
if ! .venv/bin/python -m pip install --disable-pip-version-check -e "$spec" >.venv/install.log 2>&1; then
  tail -30 .venv/install.log >&2
  echo "error: pip install of $spec failed (full log: .venv/install.log)" >&2
  exit 1
fi
