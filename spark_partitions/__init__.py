"""Batch partition planning (DESIGN §10): a PySpark job and a pure-Python reference.

Both engines read a batch file of events, validate them, drop duplicate ids, group them into
blocks keyed by ``(publisher_id, partition)`` and assign the blocks to subscriber slots with
LPT. They write the same ``plan.json`` and equivalent block files, which
:mod:`spark_partitions.blocks` reads back block by block for publishing.

Kept light on purpose: importing the package never imports pyspark or pyarrow.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
