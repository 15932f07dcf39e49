"""The output directory of a run: its layout, and writing ``plan.json`` and the rejects.

``DIR/plan.json`` (:func:`plan_json_text`), ``DIR/blocks/`` (Parquet of
:func:`block_schema`, rows sorted by ``(block, timestamp, id)``) and ``DIR/rejects/`` (JSON
lines ``{"reason", "record"}``). ``plan.json`` is removed first and written last, so a run
that fails half-way never leaves a plan describing blocks it did not write.

The reference writes to a local directory (:func:`prepare_local`, :class:`RejectSink`); the
Spark job to any filesystem Spark can reach (:class:`PlanWriter`). Reading a plan back is
:mod:`spark_partitions.blocks`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from channel_server.private_files import private_dir, write_private
from spark_partitions.formats import is_local, local_path
from spark_partitions.plan import Plan

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

PLAN_FILE = "plan.json"
BLOCKS_DIR = "blocks"
REJECTS_DIR = "rejects"
# Extra columns of the block files: the block's index in plan order, and its slot.
BLOCK_COLUMN = "block"
SLOT_COLUMN = "slot"
# The reference's single files under blocks/ and rejects/.
REJECTS_FILE = "part-00000.json"
BLOCKS_FILE = "part-00000.parquet"
# Row groups of the reference's block file: small enough that a reader streams them.
BLOCK_ROW_GROUP_ROWS = 65_536


def event_schema(integral_partitions: bool) -> pa.Schema:
    """The Arrow schema of events: :data:`~spark_partitions.rules.FIELDS` with their types
    (partition is int64 or string, see :func:`spark_partitions.plan.resolve_partitions`)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("publisher_id", pa.string()),
            ("partition", pa.int64() if integral_partitions else pa.string()),
            ("timestamp", pa.float64()),
            ("payload", pa.string()),
        ]
    )


def block_schema(integral_partitions: bool) -> pa.Schema:
    """The Arrow schema of the block files: the events plus their block and slot."""
    import pyarrow as pa

    events = event_schema(integral_partitions)
    return events.append(pa.field(BLOCK_COLUMN, pa.int32())).append(
        pa.field(SLOT_COLUMN, pa.int32())
    )


def plan_json_text(plan: Plan) -> str:
    """The bytes of ``plan.json`` (both engines write exactly this)."""
    return json.dumps(plan.to_json(), indent=2, allow_nan=False) + "\n"


def write_plan_local(plan: Plan, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``plan.json`` atomically into a local directory, 0600, from a temp file of
    its own (a fixed temp name was written through a link another user planted)."""
    path = Path(out_dir) / PLAN_FILE
    write_private(path, plan_json_text(plan))
    return path


def clear_plan_local(out_dir: str) -> Path:
    """Create ``out_dir`` (0700: the plan's files hold the batch's payloads; one another
    user owns is refused) and remove an earlier ``plan.json`` from it."""
    root = private_dir(local_path(out_dir), "plan dir")
    (root / PLAN_FILE).unlink(missing_ok=True)
    return root


def prepare_local(out_dir: str) -> Path:
    """Create ``out_dir`` and drop the outputs of an earlier run (only ours)."""
    root = clear_plan_local(out_dir)
    for name in (BLOCKS_DIR, REJECTS_DIR):
        shutil.rmtree(root / name, ignore_errors=True)
        (root / name).mkdir(mode=0o700)
    return root


class RejectSink:
    """The reference's rejects: writes every rejected row as a JSON line like the Spark
    job's rejects dataset, counts them by reason, keeps the first few as examples."""

    def __init__(self, handle: TextIO, examples: int) -> None:
        self._handle = handle
        self._limit = examples
        self.reasons: Counter[str] = Counter()
        self.examples: list[dict[str, str]] = []

    def add(self, reason: str, record: str) -> None:
        self.reasons[str(reason)] += 1
        line = {"reason": str(reason), "record": record}
        self._handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        if len(self.examples) < self._limit:
            self.examples.append(line)

    @property
    def total(self) -> int:
        return sum(self.reasons.values())


class PlanWriter:
    """The output directory of one Spark run: a local one gets plain file operations
    (``plan.json`` written atomically); anything else (``hdfs://``, ``s3a://``) goes
    through the Hadoop FileSystem the session already uses."""

    def __init__(self, spark: SparkSession, out_dir: str) -> None:
        self._spark = spark
        self._out_dir = out_dir.rstrip("/")
        self._local = is_local(out_dir)

    def child(self, name: str) -> str:
        """The path of an entry of the output directory, for Spark's writers."""
        return f"{self._out_dir}/{name}"

    def clear_plan(self) -> None:
        """Remove an earlier ``plan.json`` so a failed run never leaves a stale one."""
        if self._local:
            clear_plan_local(self._out_dir)
        else:
            path, fs = self._hadoop(PLAN_FILE)
            fs.delete(path, False)

    def write_plan(self, plan: Plan) -> None:
        """Write ``plan.json``, last, once the blocks are in place."""
        if self._local:
            write_plan_local(plan, local_path(self._out_dir))
            return
        path, fs = self._hadoop(PLAN_FILE)
        stream = fs.create(path, True)
        try:
            stream.write(bytearray(plan_json_text(plan).encode("utf-8")))
        finally:
            stream.close()

    def _hadoop(self, name: str):
        jvm = self._spark.sparkContext._jvm
        assert jvm is not None, "the session has stopped"
        path = jvm.org.apache.hadoop.fs.Path(self.child(name))
        conf = self._spark.sparkContext._jsc.hadoopConfiguration()
        return path, path.getFileSystem(conf)
