"""The SQLite store's files: the database and its WAL files private to the broker's user,
and the lock that keeps two brokers off one data directory.

The data directory is private to the broker's user whatever the umask: 0700, and the
database, its WAL and shared-memory files and the lock file 0600 (SQLite gives the WAL and
shared-memory files the database's mode; they are checked once open too). A wider mode
left by an older broker is tightened at start, with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from pathlib import Path
from typing import IO

from channel_server.errors import StoreError
from channel_server.private_files import (
    open_private_append,
    os_reason,
    private_dir,
    tighten_private,
)
from channel_server.store.sqlite_schema import SCHEMA, migrate
from channel_server.store.sqlite_sql import CACHED_STATEMENTS

DB_FILE = "channels.sqlite"
LOCK_FILE = "broker.lock"
WAL_SIZE_LIMIT_BYTES = 64 << 20
"""After a checkpoint the WAL file is cut back to this size (it grows during bursts)."""
WAL_SUFFIXES = ("-wal", "-shm")
"""The files SQLite keeps next to the database in WAL mode (made when it is opened)."""


def tighten_wal_files(db_path: Path) -> None:
    for suffix in WAL_SUFFIXES:
        tighten_private(db_path.with_name(db_path.name + suffix))


def take_dir_lock(data_dir: Path) -> IO[str]:
    """Make the data directory private and hold an exclusive lock on it for the life of
    the store (StoreError when it cannot be used)."""
    private_dir(data_dir, "data dir")
    handle = open_private_append(data_dir / LOCK_FILE, readable=True)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise StoreError(str(data_dir), f"in use by another broker (pid {holder})") from None
    try:
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
    except OSError as exc:  # a full disk (session 35's storage probe: untyped, no path)
        with contextlib.suppress(OSError):
            handle.close()  # (it flushes again, and fails again, but closes)
        raise StoreError(str(data_dir / LOCK_FILE), f"cannot write: {os_reason(exc)}") from None
    return handle


NOT_DAMAGED = frozenset((sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN))
"""Primary result codes of an open that failed for want of space, or of a file it could
make (-wal, -shm): the file system's state, not the database's."""


def unopened(exc: sqlite3.DatabaseError, data_dir: Path) -> str:
    """Why the database could not be opened, and what to do: a full or read-only file
    system is said as such. Saying "it may be damaged ... move it away to start empty"
    of a healthy store on a full disk led to throwing its events away (session 35's
    storage probe)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and (code & 0xFF) in NOT_DAMAGED:  # the primary result code
        try:
            st = os.statvfs(data_dir)
        except OSError:
            st = None
        if st is not None and st.f_flag & os.ST_RDONLY:
            where = "its file system is read-only"
        elif st is not None:
            where = f"its file system has {st.f_bavail * st.f_frsize:,} bytes free"
        else:
            where = "its file system cannot be read"
        return (
            f"cannot be opened ({exc}); {where}. SQLite could not read or write its files (a "
            "full disk, a quota, an I/O error): nothing says the database is damaged. Make "
            "room or fix the file system and start the broker again; do not move it away"
        )
    return (
        f"cannot be opened ({exc}); it may be damaged. "
        "Restore it from a backup or move it away to start empty"
    )


def open_db(path: Path, synchronous: str, busy_timeout_s: float) -> sqlite3.Connection:
    """The store's connection: WAL, the sync level, an integrity check, the schema made or
    upgraded; checkpoints are left to the store's maintenance thread."""
    db = sqlite3.connect(
        path,
        isolation_level=None,
        check_same_thread=False,
        timeout=busy_timeout_s,
        cached_statements=CACHED_STATEMENTS,
    )
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        if (check := db.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {check}")
        db.executescript(SCHEMA)
        migrate(db)
        db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run in their own thread
        db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
        tighten_wal_files(path)  # made by now, with the database's mode
    except BaseException:
        db.close()
        raise
    return db


class FilesWatch:
    """Whether the database and its WAL are still the files the store has open. Deleted
    or replaced under a running broker (a cleaner, an operator's ``rm``), SQLite goes on
    writing to files no name leads to, and what it commits there is gone at the next
    crash, with the journal segments the store deleted once their rows were committed
    (session 35's storage probe: up to 1,440 accepted events lost, not a line logged)."""

    def __init__(self, db_path: Path) -> None:
        self._paths = (db_path, db_path.with_name(db_path.name + "-wal"))
        self._known = [_identity(path) for path in self._paths]

    def missing(self) -> str | None:
        """What is no longer there, or None when both are (a WAL not made yet is taken
        as it comes)."""
        for n, path in enumerate(self._paths):
            now = _identity(path)
            if self._known[n] is None:
                self._known[n] = now
            elif now != self._known[n]:
                return f"{path} was {'replaced' if now else 'removed'} under the broker"
        return None


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
