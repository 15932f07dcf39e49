"""``spark_partitions plan`` without the spark extra (a base install, as README's demo
makes): one line saying what to install, not a traceback or a bare ModuleNotFoundError."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BLOCKED = "import sys\nfor name in ('pyarrow', 'pyspark'):\n    sys.modules[name] = None\n"


def test_the_plan_without_pyarrow_says_what_to_install(tmp_path: Path) -> None:
    source = tmp_path / "events.jsonl"
    row = {"id": "e1", "publisher_id": "p", "partition": 0, "timestamp": 1.0}
    source.write_text(json.dumps(row) + "\n")
    code = BLOCKED + "from spark_partitions.cli import main\nraise SystemExit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, "plan", str(source), "--subscribers", "2", "--out",
         str(tmp_path / "plan")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        "spark_partitions: error: pyarrow is not installed (the plan's blocks are Parquet): "
        "install the spark extra: pip install -e '.[spark]'"
    ]
