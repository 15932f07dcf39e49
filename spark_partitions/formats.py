"""Which reader a batch needs: by ``--format``, else by the file extension.

A directory (a dataset written by Spark or anyone else) takes the format of its data files;
names starting with ``_`` or ``.`` are bookkeeping (``_SUCCESS``, ``.crc``) and skipped, as
Hadoop does.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from urllib.parse import urlparse

from spark_partitions.config import InputError


class Format(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"
    PARQUET = "parquet"


EXTENSIONS = {
    ".jsonl": Format.JSONL,
    ".ndjson": Format.JSONL,
    ".json": Format.JSONL,
    ".csv": Format.CSV,
    ".parquet": Format.PARQUET,
    ".pq": Format.PARQUET,
}


def is_local(path: str) -> bool:
    """A plain path or ``file:`` URI; anything else (hdfs://, s3a://) only Spark can read."""
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or len(scheme) == 1  # a Windows drive letter


def local_path(path: str) -> Path:
    """The filesystem path of a local input or output location."""
    parsed = urlparse(path)
    return Path(parsed.path if parsed.scheme == "file" else path)


def is_hidden(path: str) -> bool:
    """Whether a file is bookkeeping (its name starts with ``_`` or ``.``), not data."""
    return path.rsplit("/", 1)[-1].startswith(("_", "."))


def data_files(path: str) -> list[Path]:
    """The data files of a local file or directory, sorted; raises InputError if none."""
    root = local_path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise InputError(f"input not found: {path}")
    files = sorted(p for p in root.rglob("*") if p.is_file() and not is_hidden(p.name))
    if not files:
        raise InputError(f"input directory has no data files: {path}")
    return files


def detect_format(path: str, explicit: str | None = None) -> Format:
    """The format named by ``explicit``, else the one the extension(s) imply."""
    if explicit:
        return Format(explicit)
    if not is_local(path) or not local_path(path).is_dir():
        return _by_extension(path)
    found = {_by_extension(str(p)) for p in data_files(path)}
    if len(found) != 1:
        raise InputError(f"{path}: mixed or unknown file types; pass --format")
    return found.pop()


def _by_extension(path: str) -> Format:
    suffix = Path(urlparse(path).path).suffix.lower()
    try:
        return EXTENSIONS[suffix]
    except KeyError:
        known = ", ".join(sorted(EXTENSIONS))
        raise InputError(f"{path}: unknown extension {suffix!r} ({known}); pass --format") from None
