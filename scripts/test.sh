#!/usr/bin/env bash
# Set everything up, lint, type-check, and run the whole test suite (unit, integration,
# browser, Spark, PostgreSQL).
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not spark" -x
# Two workers (pytest-xdist), one test module each at a time: most tests wait on real
# processes, so two workers take a third off the time on 2 cores. $PYTEST_WORKERS changes how many
# (0: one process, as pytest runs alone).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/browser_deps.sh
scripts/postgres_deps.sh
scripts/compile.sh dev,spark,browser,postgres
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
.venv/bin/ruff check .
.venv/bin/mypy  # the packages and settings of [tool.mypy] in pyproject.toml
.venv/bin/python -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
