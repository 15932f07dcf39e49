"""Clients' state files: checked names and small JSON state, in private directories.

Directories and files are made by :mod:`channel_server.private_files` (0700 and 0600,
whatever the umask; a wider mode is tightened and logged). A file name is built from plain
parts (:func:`state_path`) and checked before anything is written, and a file is never
created through a symbolic link. State files are written atomically (temp file, fsync,
rename), so a crash leaves the old or the new state, never a torn one.

Bad names are :class:`InvalidArgument`; a directory or file that cannot be used, or a state
file that is not what it should be, is a one-line :class:`StoreError` naming the path.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from channel_server.errors import InvalidArgument, StoreError
from channel_server.names import NAME_PATTERN
from channel_server.private_files import (
    DIR_MODE,
    FILE_MODE,
    STATE_DIR_ENV,
    default_state_dir,
    open_private_append,
    open_private_fd,
    os_reason,
    private_dir,
    tighten_private,
    write_private,
)

log = logging.getLogger(__name__)
# The private-file helpers live in channel_server.private_files; clients take them here.
__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "STATE_DIR_ENV",
    "AppendOnlyFile",
    "StateFile",
    "complete_lines",
    "default_state_dir",
    "malformed",
    "open_private_append",
    "private_dir",
    "read_lines",
    "read_state",
    "state_path",
    "tighten_private",
    "write_private",
]
NAME_PART_RE = re.compile(NAME_PATTERN)
"""A channel, group or subscriber name, as it may appear in a state file's name."""
NAME_MAX = 255
"""The longest file name most file systems take."""


def state_path(directory: Path, *name_parts: str, suffix: str = "") -> Path:
    """``directory / "<part>-<part>...<suffix>"``, refusing (InvalidArgument) any part that
    is not a plain name (1-128 characters of ``[A-Za-z0-9._-]``, not ``.`` or ``..``) and a
    name that resolves out of ``directory`` (a symbolic link). Writes nothing."""
    for part in (*name_parts, suffix) if suffix else name_parts:
        if type(part) is not str or not NAME_PART_RE.fullmatch(part) or part in (".", ".."):
            raise InvalidArgument(
                f"state file name part {part!r}",
                "must be 1-128 characters of [A-Za-z0-9._-], not '.' or '..'",
            )
    name = "-".join(name_parts) + suffix
    if not name_parts or len(name) > NAME_MAX:
        raise InvalidArgument(f"state file name {name!r}", f"must be 1-{NAME_MAX} characters")
    path = Path(directory) / name
    if Path(os.path.realpath(path)).parent != Path(os.path.realpath(directory)):
        raise InvalidArgument(str(path), "leads out of its directory (a symbolic link)")
    return path


def read_state(path: Path) -> str | None:
    """The text of a state file, None when there is none (StoreError when unreadable or
    not UTF-8). Line ends are kept as they are ("\\r" is not turned into "\\n")."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise malformed(path, "not a text file") from None
    except OSError as exc:
        raise StoreError(str(path), f"cannot read: {os_reason(exc)}") from None


def complete_lines(path: Path, text: str) -> list[str]:
    """The lines of an append-only file, split on "\\n" only (never on "\\r" or other
    separators). A last line without its "\\n" was torn by a crash as it was written, and
    is left out (logged)."""
    lines = text.split("\n")
    if torn := lines.pop():
        log.warning("%s: ignoring a last line torn by a crash: %.60r", path, torn)
    return lines


def read_lines(path: Path) -> list[str]:
    """The complete lines of an append-only file ([] when there is none; see
    :func:`complete_lines`)."""
    return complete_lines(path, read_state(path) or "")


_path_locks: dict[Path, threading.Lock] = {}
_path_locks_guard = threading.Lock()
"""Guards ``_path_locks``: one lock per state file path, for the threads of this process."""


def _thread_lock(path: Path) -> threading.Lock:
    with _path_locks_guard:
        return _path_locks.setdefault(path, threading.Lock())


def malformed(path: Path, what: str) -> StoreError:
    """The one-line error for a state file that is not what it should be."""
    return StoreError(str(path), f"{what}; fix or remove it")


class StateFile:
    """A JSON object on disk, 0600 in a 0700 directory (both made or tightened when the
    StateFile is made; ``path`` must be a plain name in its directory)."""

    def __init__(self, path: Path) -> None:
        self.path = state_path(path.parent, path.name)
        private_dir(self.path.parent)
        tighten_private(self.path)

    def load(self) -> dict[str, Any]:
        """The object (StoreError naming the file when it is not one)."""
        if (text := read_state(self.path)) is None:
            return {}
        try:
            data = json.loads(text)
        except ValueError:
            raise self.malformed("not a JSON state file") from None
        if not isinstance(data, dict):
            raise self.malformed("not a JSON object")
        return data

    def save(self, data: dict[str, Any]) -> None:
        private_dir(self.path.parent)
        write_private(self.path, json.dumps(data))

    def update(self, **changes: Any) -> dict[str, Any]:
        with self.locked():
            data = self.load()
            data.update(changes)
            self.save(data)
        return data

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the file for a read-modify-write: against the other threads of this
        process (a lock per path) and other processes (``flock`` on a ``.lock`` file
        beside it), so two writers of one file never lose each other's changes."""
        with _thread_lock(self.path):
            fd = open_private_fd(
                self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def malformed(self, what: str) -> StoreError:
        return malformed(self.path, what)

    def section(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        """``data[key]``, a JSON object ({} when absent or null)."""
        value = data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.malformed(f"{key!r} is not a JSON object")
        return value


class AppendOnlyFile:
    """A file of lines that grows by appends and is now and then rewritten whole
    (compacted): 0600 in a 0700 directory, ``path`` a plain name in its directory, the
    rewrite atomic (temp file, rename), so a crash leaves the old file or the new one.

    It is closed until the first :meth:`rewrite`. Not thread-safe: its owner locks.
    """

    def __init__(self, path: Path) -> None:
        self.path = state_path(path.parent, path.name)
        self.lines = 0
        """The lines in the file: those the last rewrite wrote and those appended since."""
        self.appended = 0
        """The lines appended since the last rewrite."""
        self._file: IO[str] | None = None

    @property
    def is_open(self) -> bool:
        return self._file is not None

    def read(self) -> list[str]:
        """The complete lines on disk (a last line torn by a crash left out)."""
        return read_lines(self.path)

    def rewrite(self, lines: list[str]) -> None:
        """Replace the file with ``lines`` and open it for appending after them."""
        self.close()
        private_dir(self.path.parent)
        write_private(self.path, "".join(line + "\n" for line in lines))
        self._file = open_private_append(self.path)
        self.lines, self.appended = len(lines), 0

    def append(self, lines: list[str], *, sync: bool = False) -> None:
        """Write ``lines`` (to the disk too with ``sync``: fsync), all or none: a write
        that fails (a full disk) is cut off the file and raised as a ``StoreError``.
        Through the file descriptor, not a buffer: a line a failed flush left in a
        buffer was written later (at the next append, or at exit) and then said received
        a message its client never showed (session 35's storage probe)."""
        if self._file is None:
            raise ValueError(f"{self.path}: the file is closed")
        fd = self._file.fileno()
        data = memoryview("".join(line + "\n" for line in lines).encode())
        end: int | None = None
        try:
            end = os.fstat(fd).st_size  # where these lines start (the file appends)
            while data:
                data = data[os.write(fd, data) :]
            if sync:
                os.fsync(fd)
        except OSError as exc:
            if end is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, end)  # no part of them left for the next lines to follow
            raise StoreError(str(self.path), f"cannot write: {os_reason(exc)}") from None
        self.lines += len(lines)
        self.appended += len(lines)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
