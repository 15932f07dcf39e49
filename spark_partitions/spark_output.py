"""Where the Spark engine writes: any filesystem Spark can reach, not only a local one.

Local directories get plain file operations (``plan.json`` written atomically); anything
else (``hdfs://``, ``s3a://``) goes through the Hadoop FileSystem the session already uses.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_partitions.formats import is_local, local_path
from spark_partitions.plan import PLAN_FILE, Plan, plan_json_text, write_plan_local


class PlanWriter:
    """The output directory of one Spark run."""

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
            root = local_path(self._out_dir)
            root.mkdir(parents=True, exist_ok=True)
            (root / PLAN_FILE).unlink(missing_ok=True)
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
        path = jvm.org.apache.hadoop.fs.Path(self.child(name))
        conf = self._spark.sparkContext._jsc.hadoopConfiguration()
        return path, path.getFileSystem(conf)
