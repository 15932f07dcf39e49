"""Read a local batch with the standard library (JSON lines, CSV) or pyarrow (Parquet).

Each reader yields :class:`RawRow` items: the five field values typed the way the format
types them (see :mod:`spark_partitions.rules`), or a reason the row could not even be split
into fields, plus the source text for the rejects output. They mirror the Spark readers of
:mod:`spark_partitions.spark_read` rule for rule. :func:`read_located_rows` also says where
each row is in its file (the publisher names the lines of invalid rows with it).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from spark_partitions.config import InputError
from spark_partitions.formats import Format, data_files
from spark_partitions.rules import BLANK_LINE_RE, FIELDS, Reason, csv_value

PARQUET_BATCH_ROWS = 65_536
CSV_FIELD_MAX_CHARS = 16 << 20
"""The longest CSV field read (the csv module's default, 131,072, ended a whole run at a
payload well under the channels' 1 MiB; a longer payload is refused per row)."""
_ALLOWED = frozenset(FIELDS)


class RawRow(NamedTuple):
    """One input row: field values, or the reason it has none; ``source`` for rejects."""

    values: tuple[Any, ...] | None
    reason: Reason | None
    source: Any


class Location(NamedTuple):
    """Where a row is: its file, and the line it starts on (JSON lines, CSV) or its row
    number (Parquet, ``line_is_row``), counted from 1."""

    file: Path
    line: int
    line_is_row: bool = False

    def __str__(self) -> str:
        return f"{'row' if self.line_is_row else 'line'} {self.line}"


def read_rows(path: str, fmt: Format) -> Iterator[RawRow]:
    """Every row of every data file under ``path``, in file order."""
    reader = _READERS[fmt]
    for file in data_files(path):
        for _, row in reader(file):
            yield row


def read_located_rows(path: str, fmt: Format) -> Iterator[tuple[Location, RawRow]]:
    """Like :func:`read_rows`, each row with its :class:`Location`."""
    reader = _READERS[fmt]
    is_row = fmt is Format.PARQUET
    for file in data_files(path):
        for line, row in reader(file):
            yield Location(file, line, is_row), row


def source_text(source: Any) -> str:
    """The rejects output's ``record``: the raw line, or the row as JSON."""
    if isinstance(source, str):
        return source
    if isinstance(source, tuple):
        source = dict(zip(FIELDS, source, strict=True))
    return json.dumps(source, default=str, ensure_ascii=False)


def check_columns(columns: list[str], where: str) -> None:
    """Refuse a CSV or Parquet input with unknown or repeated columns (module doc)."""
    unknown = [name for name in columns if name not in _ALLOWED]
    if unknown:
        raise InputError(f"{where}: unknown column {unknown[0]!r}; allowed: {', '.join(FIELDS)}")
    if len(set(columns)) != len(columns):
        raise InputError(f"{where}: repeated column names {columns}")


# -- JSON lines ---------------------------------------------------------------------------
class _Malformed(ValueError):
    pass


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _Malformed("repeated key")
    return result


def _no_constant(name: str) -> Any:
    raise _Malformed(f"{name} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_no_repeated_keys, parse_constant=_no_constant)


def parse_json_line(line: str) -> RawRow:
    """One JSON-lines line (known not blank) as a row."""
    try:
        obj = _DECODER.decode(line)
    except (ValueError, RecursionError):
        return RawRow(None, Reason.MALFORMED_JSON, line)
    if not isinstance(obj, dict):
        return RawRow(None, Reason.NOT_OBJECT, line)
    if not obj.keys() <= _ALLOWED:
        return RawRow(None, Reason.UNKNOWN_FIELD, line)
    return RawRow(tuple(obj.get(name) for name in FIELDS), None, line)


def _read_jsonl(file: Path) -> Iterator[tuple[int, RawRow]]:
    with file.open(encoding="utf-8-sig", errors="replace") as handle:  # (-sig: a BOM)
        for number, raw in enumerate(handle, 1):
            line = raw.rstrip("\r\n")
            if not BLANK_LINE_RE.fullmatch(line):
                yield number, parse_json_line(line)


# -- CSV ----------------------------------------------------------------------------------
def _read_csv(file: Path) -> Iterator[tuple[int, RawRow]]:
    """Rows with the line each record starts on (a quoted field may span lines)."""
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_MAX_CHARS))
    with file.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
        rows = csv.reader(handle)
        header = next(rows, None)
        if header is None:
            return
        check_columns(header, str(file))
        where = [header.index(name) if name in header else -1 for name in FIELDS]
        ended = rows.line_num
        for row in rows:
            start, ended = ended + 1, rows.line_num
            if not row:
                continue
            if len(row) != len(header):
                source = dict(zip(header, row, strict=False))
                yield start, RawRow(None, Reason.FIELD_COUNT, source)
                continue
            values = tuple(
                None if i < 0 else csv_value(name, row[i])
                for name, i in zip(FIELDS, where, strict=True)
            )
            yield start, RawRow(values, None, dict(zip(header, row, strict=True)))


# -- Parquet ------------------------------------------------------------------------------
def _read_parquet(file: Path) -> Iterator[tuple[int, RawRow]]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(file)
    columns = parquet.schema_arrow.names
    check_columns(columns, str(file))
    number = 0
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
        by_name = {name: batch.column(name).to_pylist() for name in columns}
        empty = [None] * batch.num_rows
        for values in zip(*(by_name.get(name, empty) for name in FIELDS), strict=True):
            number += 1
            yield number, RawRow(values, None, values)


_READERS: dict[Format, Callable[[Path], Iterator[tuple[int, RawRow]]]] = {
    Format.JSONL: _read_jsonl,
    Format.CSV: _read_csv,
    Format.PARQUET: _read_parquet,
}
