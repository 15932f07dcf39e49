"""Read a written plan back, one block at a time, for publishing (writing it is
:mod:`spark_partitions.output`).

Both engines write ``blocks/`` as Parquet files whose rows are sorted by ``(block,
timestamp, id)``, where ``block`` is the block's index in plan order and no block is split in
any particular way across files. :func:`iter_blocks` merges the files on that order, so it
streams: it holds one record batch per file and the block being yielded, never the batch.
Any pyarrow filesystem URI works (a local path, ``file://``, ``s3://``, ``hdfs://``).
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Iterator
from typing import Any

from spark_partitions.config import InputError
from spark_partitions.formats import is_hidden, is_local, local_path
from spark_partitions.output import BLOCK_COLUMN, BLOCKS_DIR, PLAN_FILE
from spark_partitions.rules import FIELDS

READ_BATCH_ROWS = 8_192

Event = dict[str, Any]


def load_plan(out_dir: str) -> dict[str, Any]:
    """The ``plan.json`` document of a planned output directory."""
    fs, root = _filesystem(out_dir)
    try:
        with fs.open_input_stream(f"{root}/{PLAN_FILE}") as stream:
            return json.loads(stream.read().decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"no {PLAN_FILE} in {out_dir}: run the plan first") from None


def iter_blocks(out_dir: str) -> Iterator[tuple[dict[str, Any], list[Event]]]:
    """Each plan block (its ``plan.json`` dict) with its events in (timestamp, id) order.

    Blocks come in plan order. Raises InputError if the files disagree with the plan.
    """
    plan = load_plan(out_dir)
    blocks = plan["blocks"]
    fs, root = _filesystem(out_dir)
    streams = [_file_rows(fs, path) for path in _block_files(fs, f"{root}/{BLOCKS_DIR}")]
    merged = heapq.merge(*streams, key=lambda row: row[0])
    expected = 0
    for index, rows in itertools.groupby(merged, key=lambda row: row[0][0]):
        events = [event for _, event in rows]
        _check_block(blocks, index, expected, len(events), out_dir)
        expected += 1
        yield blocks[index], events
    if expected != len(blocks):
        raise InputError(f"{out_dir}: {len(blocks) - expected} planned blocks have no events")


def _check_block(blocks: list[dict], index: int, expected: int, count: int, where: str) -> None:
    if index != expected or count != blocks[index]["count"]:
        raise InputError(f"{where}: block files do not match {PLAN_FILE} at block {expected}")


def _file_rows(fs, path: str) -> Iterator[tuple[tuple[int, float, str], Event]]:
    import pyarrow.parquet as pq

    with fs.open_input_file(path) as handle:
        columns = [*FIELDS, BLOCK_COLUMN]
        for batch in pq.ParquetFile(handle).iter_batches(READ_BATCH_ROWS, columns=columns):
            values = [batch.column(name).to_pylist() for name in columns]
            for *fields, block in zip(*values, strict=True):
                event = dict(zip(FIELDS, fields, strict=True))
                yield (block, event["timestamp"], event["id"]), event


def _block_files(fs, directory: str) -> list[str]:
    from pyarrow import fs as pafs

    try:
        infos = fs.get_file_info(pafs.FileSelector(directory, recursive=True))
    except FileNotFoundError:
        raise InputError(f"no {BLOCKS_DIR}/ directory at {directory}") from None
    names = (info.path for info in infos if info.type == pafs.FileType.File)
    return sorted(p for p in names if p.endswith(".parquet") and not is_hidden(p))


def _filesystem(out_dir: str):
    from pyarrow import fs as pafs

    if is_local(out_dir):
        return pafs.LocalFileSystem(), local_path(out_dir).resolve().as_posix()
    return pafs.FileSystem.from_uri(out_dir)
