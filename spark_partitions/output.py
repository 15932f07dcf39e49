"""The output directory on a local filesystem: cleared of a previous plan before a run.

``plan.json`` is removed first and written last, so a run that fails half-way never leaves a
plan describing blocks it did not write.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from spark_partitions.formats import local_path
from spark_partitions.plan import BLOCKS_DIR, PLAN_FILE, REJECTS_DIR

REJECTS_FILE = "part-00000.json"
BLOCKS_FILE = "part-00000.parquet"
# Row groups of the reference's block file: small enough that a reader streams them.
BLOCK_ROW_GROUP_ROWS = 65_536


def prepare_local(out_dir: str) -> Path:
    """Create ``out_dir`` and drop the outputs of an earlier run (only ours)."""
    root = local_path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    (root / PLAN_FILE).unlink(missing_ok=True)
    for name in (BLOCKS_DIR, REJECTS_DIR):
        shutil.rmtree(root / name, ignore_errors=True)
        (root / name).mkdir()
    return root
