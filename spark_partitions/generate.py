"""Synthetic batch files for tests and benchmarks, reproducible from a seed.

Events have ids ``evt-<row>``, a random publisher out of ``publishers`` (uniform, or
Zipf-weighted with exponent ``zipf`` so a few publishers carry most events) and a random
partition out of ``partitions``, timestamps in random order on a millisecond grid (so
ties happen), and payloads of ``payload_size`` characters. A ``duplicates`` fraction of the
rows repeat an earlier row's id and publisher (one event, as a channel with ids unique per
publisher counts them) with a fresh timestamp; an ``invalid`` fraction break one
rule (bad publisher id, empty id, or no timestamp).
"""

from __future__ import annotations

import csv
import itertools
import json
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_partitions.formats import Format, detect_format
from spark_partitions.output import event_schema
from spark_partitions.rules import FIELDS

BASE_TIMESTAMP = 1_700_000_000.0
TICK_SECONDS = 0.001
# Payloads are slices of one random text at random offsets: distinct, and cheap to make.
PAYLOAD_TEXT_CHARS = 1 << 16
PARQUET_CHUNK_ROWS = 100_000
_INVALID_KINDS = ("publisher_id", "id", "timestamp")


@dataclass(frozen=True, slots=True)
class GenerateConfig:
    """What to generate; the defaults make a small, clean batch."""

    count: int
    publishers: int = 10
    partitions: int = 10
    payload_size: int = 100
    duplicates: float = 0.0
    invalid: float = 0.0
    zipf: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.count < 0 or self.payload_size < 0:
            raise ValueError("count and payload_size must be >= 0")
        if self.publishers < 1 or self.partitions < 1:
            raise ValueError("publishers and partitions must be at least 1")
        if self.zipf < 0:
            raise ValueError("zipf must be >= 0")
        for name in ("duplicates", "invalid"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a fraction between 0 and 1")


def generate(out: str | Path, config: GenerateConfig, fmt: Format | None = None) -> Path:
    """Write the batch to ``out`` (format from ``fmt`` or the extension); returns the path."""
    path = Path(out)
    fmt = fmt or detect_format(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    _WRITERS[fmt](path, iter_events(config))
    return path


def iter_events(config: GenerateConfig) -> Iterator[tuple[Any, ...]]:
    """The rows, as tuples of :data:`FIELDS` values."""
    rnd = random.Random(config.seed)
    text = _random_text(rnd, PAYLOAD_TEXT_CHARS + config.payload_size)
    span = max(config.count, 1)
    weights = list(
        itertools.accumulate((rank + 1) ** -config.zipf for rank in range(config.publishers))
    )
    names = [f"pub-{n}" for n in range(config.publishers)]
    publishers: list[str] = []  # of every row: a duplicate repeats its source's publisher
    for row in range(config.count):
        publisher = rnd.choices(names, cum_weights=weights)[0]
        source = rnd.randrange(row) if row and rnd.random() < config.duplicates else row
        if config.duplicates:  # (kept only then: a reference per row)
            publisher = publisher if source == row else publishers[source]
            publishers.append(publisher)  # else 1 in `publishers` was one under --ids publisher
        event = [
            f"evt-{source}",
            publisher,
            rnd.randrange(config.partitions),
            BASE_TIMESTAMP + rnd.randrange(span) * TICK_SECONDS,
            _payload(rnd, text, config.payload_size),
        ]
        if rnd.random() < config.invalid:
            _break(event, rnd.choice(_INVALID_KINDS))
        yield tuple(event)


def _break(event: list[Any], field: str) -> None:
    broken = {"publisher_id": "not a publisher!", "id": "", "timestamp": None}
    event[FIELDS.index(field)] = broken[field]


def _payload(rnd: random.Random, text: str, size: int) -> str:
    start = rnd.randrange(PAYLOAD_TEXT_CHARS)
    return text[start : start + size]


def _random_text(rnd: random.Random, size: int) -> str:
    return "".join(rnd.choices(string.ascii_letters + string.digits, k=size))


def _write_jsonl(path: Path, rows: Iterator[tuple[Any, ...]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(dict(zip(FIELDS, row, strict=True))) + "\n")


def _write_csv(path: Path, rows: Iterator[tuple[Any, ...]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FIELDS)
        for row in rows:
            writer.writerow("" if value is None else _csv_text(value) for value in row)


def _csv_text(value: Any) -> str:
    return repr(value) if type(value) is float else str(value)


def _write_parquet(path: Path, rows: Iterator[tuple[Any, ...]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = event_schema(integral_partitions=True)
    with pq.ParquetWriter(path, schema) as writer:
        while chunk := [row for _, row in zip(range(PARQUET_CHUNK_ROWS), rows, strict=False)]:
            columns = list(zip(*chunk, strict=True))
            writer.write_table(pa.table(columns, schema=schema))


_WRITERS = {Format.JSONL: _write_jsonl, Format.CSV: _write_csv, Format.PARQUET: _write_parquet}
