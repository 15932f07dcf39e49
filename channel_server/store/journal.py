"""The SQLite store's publish journal: append-only segment files in the data directory.

A publish is durable once its record is written here (and, with ``synchronous=FULL``,
synced): one ``write`` of the batch instead of a row per event in SQLite. Most events are
acknowledged within milliseconds, and those never become rows at all: the store's
maintenance round writes only their ids into the delivered window, and moves into SQLite
just what stayed unacknowledged for a while (see :mod:`channel_server.store.journaled`).

A record is framed as its length (4 bytes, big-endian), the CRC-32 of its body (4 bytes)
and the body: msgpack ``[channel key base, next offset, events]``, each event the array
of its fields (:func:`pack_record`). Reading stops at a torn record (a power loss in the
middle of a write): what follows it was never acknowledged to a publisher, since each
write completes before the publish returns. It stops at a damaged one too (whole, but its
CRC no longer matches: the disk changed it): then accepted events are lost, which the
store says as an error, keeping the segment (:data:`DAMAGED_SUFFIX`).

A segment is done once every event in it is a row or acknowledged: the store marks it so
in a round's transaction once that is committed, and then deletes it. A restart replays the segments
not marked done, so no event is ever lost between the journal and the database.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec

from channel_server.errors import StoreError
from channel_server.events import Event
from channel_server.private_files import open_private_fd

log = logging.getLogger(__name__)
SEGMENT_NAME = re.compile(r"journal-(\d{10})\.log")
DAMAGED_SUFFIX = ".damaged"
"""Added to the name of a segment found damaged: kept for a look, never replayed again."""
HEADER_BYTES = 8
"""length (4) + CRC-32 (4)"""
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(tuple[int, int, list[Event]])


def segment_path(directory: Path, number: int) -> Path:
    return directory / f"journal-{number:010d}.log"


def segments(directory: Path) -> list[tuple[int, Path]]:
    """The segment files in ``directory``, oldest first."""
    found = []
    for path in directory.iterdir():
        match = SEGMENT_NAME.fullmatch(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + zlib.crc32(body).to_bytes(4, "big") + body


def pack_record(base: int, next_offset: int, events: Sequence[Event]) -> bytes:
    """One publish's record, framed: its events encoded in C, each as the array of its
    fields (:class:`~channel_server.events.Event` is ``array_like``)."""
    return frame(_ENCODER.encode((base, next_offset, events)))


def read_records(
    path: Path, damaged: list[int] | None = None
) -> Iterator[tuple[int, int, list[Event]]]:
    """The records of one segment in order: (channel key base, next offset, events);
    stops (and says so) at a torn or damaged one. A segment is the broker's own private
    file, so its payloads are decoded as they were written, maps and all.

    A record cut short at the end was torn by a crash in the middle of its write: its
    publish never returned, so nothing accepted is lost (a warning). A whole record whose
    CRC does not match was damaged after it was written: publishes accepted then are lost,
    and its byte position goes into ``damaged`` (when given; else a warning too)."""
    data = path.read_bytes()
    at = 0
    while at < len(data):
        header = data[at : at + HEADER_BYTES]
        size = int.from_bytes(header[:4], "big") if len(header) == HEADER_BYTES else -1
        body = data[at + HEADER_BYTES : at + HEADER_BYTES + size] if size >= 0 else b""
        if size < 0 or len(body) != size or zlib.crc32(body) != int.from_bytes(header[4:], "big"):
            torn = size < 0 or len(body) != size  # cut short (or a length damaged too)
            if torn or damaged is None:
                log.warning(
                    "%s: a torn record at byte %d (a write a crash cut short); the %d bytes "
                    "from there are ignored",
                    path,
                    at,
                    len(data) - at,
                )
            else:
                damaged.append(at)
            return
        try:
            record = _DECODER.decode(body)
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            raise StoreError(
                str(path), f"record at byte {at} is not a journal record: {exc}"
            ) from None
        yield record
        at += HEADER_BYTES + size


class Journal:
    """Appends records to the current segment; ``rotate`` starts a new one. Not
    thread-safe: the store calls it under its lock."""

    def __init__(self, directory: Path, sync: bool, after: int = 0) -> None:
        """``after``: the highest segment number a past life used (never reused)."""
        self.directory = directory
        self.sync = sync
        existing = segments(directory)
        self._next = max(after, existing[-1][0] if existing else 0) + 1
        self.current = self._next
        self._fd: int | None = None

    @property
    def is_open(self) -> bool:
        """Whether a segment takes appends now (rotate closes it)."""
        return self._fd is not None

    def append(self, record: bytes) -> int:
        """Write one framed record (synced when ``sync``); returns its segment number."""
        if self._fd is None:
            self.current = self._next
            self._next += 1
            path = segment_path(self.directory, self.current)
            self._fd = open_private_fd(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            if self.sync:  # the new file's name must survive a power loss too
                sync_directory(self.directory)
        written = os.write(self._fd, record)
        if written != len(record):  # a regular file takes it whole, or raises
            raise OSError(f"short write to the journal ({written} of {len(record)} bytes)")
        if self.sync:
            os.fdatasync(self._fd)
        return self.current

    def rotate(self) -> int | None:
        """Close the current segment (the next append starts a new one); returns its
        number, or None when no segment was open."""
        if self._fd is None:
            return None
        os.close(self._fd)
        self._fd = None
        return self.current

    def remove(self, number: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            segment_path(self.directory, number).unlink()

    def close(self) -> None:
        self.rotate()
