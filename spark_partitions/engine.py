"""Choosing and running an engine: ``spark``, ``reference``, or ``auto`` by input size.

Light: the engines (and pyspark, pyarrow) are imported only once one is chosen.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from enum import StrEnum

from spark_partitions.config import (
    DEFAULT_AUTO_SPARK_ROWS,
    EngineUnavailable,
    InputError,
    Outcome,
    PlanConfig,
    SparkSettings,
)
from spark_partitions.formats import Format, data_files, is_local, local_path

COUNT_CHUNK_BYTES = 1 << 20
INSTALL_HINT = "pyspark is not installed: install the spark extra: pip install -e '.[spark]'"
PYARROW_HINT = (
    "pyarrow is not installed (the plan's blocks are Parquet): install the spark extra: "
    "pip install -e '.[spark]'"
)


class Engine(StrEnum):
    AUTO = "auto"
    SPARK = "spark"
    REFERENCE = "reference"


@dataclass(frozen=True, slots=True)
class Request:
    """One ``plan`` invocation, already validated by the CLI."""

    input_path: str
    out_dir: str
    fmt: Format
    config: PlanConfig
    engine: Engine = Engine.AUTO
    auto_spark_rows: int = DEFAULT_AUTO_SPARK_ROWS
    spark: SparkSettings = field(default_factory=SparkSettings)


def run(request: Request) -> Outcome:
    """Check the input exists and pyarrow is there, pick the engine, and plan."""
    _check_input(request.input_path)
    require_pyarrow()
    engine = choose_engine(request)
    if engine is Engine.REFERENCE:
        from spark_partitions.reference import run_reference

        return run_reference(request.input_path, request.fmt, request.out_dir, request.config)
    return _run_spark(request)


def choose_engine(request: Request) -> Engine:
    """The engine ``auto`` resolves to: the reference below the row threshold (local only)."""
    if request.engine is Engine.REFERENCE:
        if not is_local(request.input_path) or not is_local(request.out_dir):
            raise InputError("the reference engine works on local paths only; use --engine spark")
        return Engine.REFERENCE
    if request.engine is Engine.SPARK:
        require_pyspark()
        return Engine.SPARK
    if not (is_local(request.input_path) and is_local(request.out_dir)):
        require_pyspark()
        return Engine.SPARK
    if estimate_rows(request.input_path, request.fmt) < request.auto_spark_rows:
        return Engine.REFERENCE
    try:
        require_pyspark()
    except EngineUnavailable as exc:
        print(f"note: {exc}; planning with the reference engine", file=sys.stderr)
        return Engine.REFERENCE
    return Engine.SPARK


def require_pyarrow() -> None:
    """Both engines write the plan's blocks as Parquet (and read Parquet inputs) with it."""
    _require("pyarrow", PYARROW_HINT)


def require_pyspark() -> None:
    _require("pyspark", INSTALL_HINT)


def _require(module: str, hint: str) -> None:
    """Raise EngineUnavailable with ``hint`` (what to install) when ``module`` cannot be
    imported."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise EngineUnavailable(hint) from None


def estimate_rows(path: str, fmt: Format) -> int:
    """Rows of a local input: exact for Parquet (footers), lines for text formats."""
    files = data_files(path)
    if fmt is Format.PARQUET:
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(file).metadata.num_rows for file in files)
    return sum(_count_lines(file) for file in files)


def _count_lines(file) -> int:
    lines = 0
    with open(file, "rb") as handle:
        while chunk := handle.read(COUNT_CHUNK_BYTES):
            lines += chunk.count(b"\n")
    return lines


def _check_input(path: str) -> None:
    if is_local(path) and not local_path(path).exists():
        raise InputError(f"input not found: {path}")


def _run_spark(request: Request) -> Outcome:
    from spark_partitions.spark_job import run_spark, spark_session

    with spark_session(request.spark) as spark:
        return run_spark(spark, request.input_path, request.fmt, request.out_dir, request.config)
