"""Batch partition planning (DESIGN §10): a PySpark job and a pure-Python reference.

Both engines read a batch file of events, validate them, drop duplicate ids, group them into
blocks keyed by ``(publisher_id, partition)`` and assign the blocks to subscriber slots with
LPT. They write the same ``plan.json`` and equivalent block files, which
:mod:`spark_partitions.blocks` reads back block by block for publishing.

Kept light on purpose: importing the package never imports pyspark or pyarrow.

The modules, in the order a run uses them:

* ``cli``: ``python -m spark_partitions plan|generate``.
* ``config``: a run's settings (``PlanConfig``, ``SparkSettings``), its errors
  (``PlanError`` and below) and its ``Outcome``.
* ``engine``: picks the engine (``auto`` by input size) and runs it.
* ``formats``: the input's format and where it lives (local or a cluster path).
* ``rules``: the validation rules of one event, for both engines.
* ``reference``: the pure-Python engine (row by row), with ``reader`` (JSON lines, CSV and
  Parquet rows) and ``columnar`` (its pyarrow fast path).
* ``spark_job``: the PySpark engine and its session, with ``spark_read`` (the input as
  columns) and ``spark_rules`` (the rules as column expressions); ``spark_conf`` is the
  configuration it forces (a quiet log from the JVM's start), without importing pyspark.
* ``plan``: blocks, their LPT assignment to slots, skew (pure).
* ``output``: the output directory: ``plan.json``, block files, rejects.
* ``blocks``: reads a written plan back, block by block, for publishing.
* ``generate``: synthetic batches for tests and benchmarks.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
