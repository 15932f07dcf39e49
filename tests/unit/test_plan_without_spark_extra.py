"""``spark_partitions plan`` without the spark extra (a base install, as README's demo
makes): one line saying what to install, not a traceback or a bare ModuleNotFoundError."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.without_modules import run_without


def test_the_plan_without_pyarrow_says_what_to_install(tmp_path: Path) -> None:
    source = tmp_path / "events.jsonl"
    row = {"id": "e1", "publisher_id": "p", "partition": 0, "timestamp": 1.0}
    source.write_text(json.dumps(row) + "\n")
    result = run_without(
        ("pyarrow", "pyspark"),
        "import sys\nfrom spark_partitions.cli import main\nraise SystemExit(main(sys.argv[1:]))",
        "plan", str(source), "--subscribers", "2", "--out", str(tmp_path / "plan"),
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        "spark_partitions: error: pyarrow is not installed (the plan's blocks are Parquet): "
        "install the spark extra: pip install -e '.[spark]'"
    ]
