"""The SQLite store's files: the database and its WAL files private to the broker's user,
and the lock that keeps two brokers off one data directory.

The data directory is private to the broker's user whatever the umask: 0700, and the
database, its WAL and shared-memory files and the lock file 0600 (SQLite gives the WAL and
shared-memory files the database's mode; they are checked once open too). A wider mode
left by an older broker is tightened at start, with a warning.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path
from typing import IO

from channel_server.errors import StoreError
from channel_server.private_files import open_private_append, private_dir, tighten_private
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
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


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
