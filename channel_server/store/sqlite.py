"""The durable backup queue: SQLite in WAL mode under the broker's data directory.

One connection, guarded by ``_lock``, serves every channel of the broker. Each publish
batch is one transaction (group commit). With ``synchronous=NORMAL`` (the default) a
committed transaction survives a process crash (SIGKILL); FULL also survives power loss.
A lock file keeps two brokers off one data directory.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import msgpack

from channel_server.core.queues import DELIVERY_ORDER
from channel_server.errors import StoreError
from channel_server.events import Event, PartitionKey
from channel_server.store.base import (
    ChannelRecord,
    ChannelSnapshot,
    DeadLetterRecord,
    MemberRecord,
    Store,
)

log = logging.getLogger(__name__)
DB_FILE = "channels.sqlite"
LOCK_FILE = "broker.lock"
SCHEMA_VERSION = "2"
SYNC_LEVELS = ("OFF", "NORMAL", "FULL")
DEFAULT_SYNC = "NORMAL"
BUSY_TIMEOUT_S = 5.0
CHECKPOINT_INTERVAL_S = 1.0
WAL_SIZE_LIMIT_BYTES = 64 << 20
"""After a checkpoint the WAL file is cut back to this size (it grows during bursts)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS channels(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, kind TEXT,
    next_offset INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS groups(
    channel TEXT NOT NULL, name TEXT NOT NULL, created_offset INTEGER NOT NULL,
    PRIMARY KEY(channel, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events(
    key INTEGER PRIMARY KEY, id TEXT NOT NULL, publisher_id TEXT NOT NULL, partition,
    timestamp REAL NOT NULL, payload);
CREATE TABLE IF NOT EXISTS acks(
    channel TEXT NOT NULL, grp TEXT NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY(channel, grp, offset)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS delivered(
    key INTEGER PRIMARY KEY, id TEXT NOT NULL, accepted_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS members(
    channel TEXT NOT NULL, grp TEXT NOT NULL, member_id TEXT NOT NULL,
    callback TEXT NOT NULL, prefetch INTEGER NOT NULL,
    PRIMARY KEY(channel, grp, member_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS owners(
    channel TEXT NOT NULL, grp TEXT NOT NULL, publisher_id TEXT NOT NULL, partition,
    owner TEXT NOT NULL, PRIMARY KEY(channel, grp, publisher_id, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_letters(
    channel TEXT NOT NULL, grp TEXT NOT NULL, offset INTEGER NOT NULL, id TEXT NOT NULL,
    publisher_id TEXT NOT NULL, partition, timestamp REAL NOT NULL, payload,
    error TEXT NOT NULL, PRIMARY KEY(channel, grp, offset)) WITHOUT ROWID;
"""
OFFSET_BITS = 40
"""events and delivered are keyed by ``channel id << OFFSET_BITS | offset``: one integer
primary key (SQLite's fastest), each channel a contiguous key range in offset order."""
OFFSET_MASK = (1 << OFFSET_BITS) - 1
EVENT_COLUMNS = "id, publisher_id, partition, timestamp, payload"
GROUP_TABLES = (("groups", "name"), ("acks", "grp"), ("owners", "grp"), ("dead_letters", "grp"))


def _pack(payload: Any) -> Any:
    """Strings are stored as TEXT; anything else as msgpack in a BLOB."""
    return payload if type(payload) is str else msgpack.packb(payload, use_bin_type=True)


def _unpack(stored: Any) -> Any:
    return msgpack.unpackb(stored, raw=False) if isinstance(stored, bytes) else stored


def _event_fields(ev: Event) -> tuple:
    return (ev.id, ev.publisher_id, ev.partition, ev.timestamp, _pack(ev.payload))


def _event(offset: int, row: Sequence[Any]) -> Event:
    event_id, publisher_id, partition, timestamp, payload = row
    return Event(event_id, publisher_id, partition, timestamp, _unpack(payload), offset)


class SQLiteStore(Store):
    durable = True

    def __init__(self, data_dir: Path, synchronous: str = DEFAULT_SYNC) -> None:
        """Open (or create) the store; raises StoreError with a clear reason when the
        directory is used by another broker or the database is damaged."""
        if synchronous.upper() not in SYNC_LEVELS:
            raise StoreError(str(data_dir), f"synchronous must be one of {SYNC_LEVELS}")
        self.path = Path(data_dir) / DB_FILE
        self._lock = threading.Lock()
        """Guards _db (one connection for every channel and thread)."""
        self._lock_file = _take_dir_lock(Path(data_dir))
        self._stop = threading.Event()
        self._checkpointer: threading.Thread | None = None
        self._bases: dict[str, int] = {}
        self._acked: set[str] = set()
        """Channels that have (or had) rows in ``acks``."""
        """channel name -> key base; a channel's id never changes."""
        try:
            self._db = self._open(synchronous.upper())
        except sqlite3.DatabaseError as exc:
            self._lock_file.close()
            raise StoreError(
                str(self.path),
                f"cannot be opened ({exc}); it may be damaged. "
                "Restore it from a backup or move it away to start empty",
            ) from None

    def _open(self, synchronous: str) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S
        )
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={synchronous}")
            if (check := db.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check}")
            db.executescript(SCHEMA)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if version != SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"written with store schema {version}, this broker reads {SCHEMA_VERSION}"
                )
            db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run in their own thread
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
        except BaseException:
            db.close()
            raise
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name="sqlite-checkpoint", daemon=True
        )
        self._checkpointer.start()
        return db

    def _checkpoint_loop(self) -> None:
        """Copy the WAL into the database every CHECKPOINT_INTERVAL_S from a connection of
        its own, so no commit under the channel lock pays for a checkpoint's fsync."""
        db = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        try:
            while not self._stop.wait(CHECKPOINT_INTERVAL_S):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error as exc:
                    log.warning("checkpoint of %s failed: %s", self.path, exc)
        finally:
            db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction, under the lock; a failure rolls it back and says so."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(str(self.path), str(exc)) from exc
                raise

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- channels, groups, members -------------------------------------------------------
    def save_channel(self, record: ChannelRecord) -> None:
        base = self._base(record.name)
        with self._tx() as db:
            db.execute(
                "UPDATE channels SET kind = ? WHERE id = ? AND kind IS NULL",
                (record.kind, base >> OFFSET_BITS),
            )

    def channels(self) -> list[ChannelRecord]:
        rows = self._query("SELECT name, kind FROM channels WHERE kind IS NOT NULL ORDER BY id")
        return [ChannelRecord(name, kind) for name, kind in rows]

    def _base(self, channel: str) -> int:
        """The key base of a channel (its id << OFFSET_BITS), given an id on first use."""
        base = self._bases.get(channel)
        if base is None:
            with self._tx() as db:
                db.execute("INSERT OR IGNORE INTO channels(name) VALUES (?)", (channel,))
                (cid,) = db.execute("SELECT id FROM channels WHERE name = ?", (channel,)).fetchone()
            base = self._bases[channel] = cid << OFFSET_BITS
        return base

    def save_group(self, channel: str, group: str, created_offset: int) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO groups VALUES (?, ?, ?)", (channel, group, created_offset)
            )

    def remove_group(self, channel: str, group: str) -> None:
        with self._tx() as db:
            for table, column in GROUP_TABLES:
                db.execute(
                    f"DELETE FROM {table} WHERE channel = ? AND {column} = ?", (channel, group)
                )

    def save_member(self, record: MemberRecord) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO members VALUES (?, ?, ?, ?, ?)",
                (record.channel, record.group, record.member_id, record.callback, record.prefetch),
            )

    def remove_member(self, channel: str, group: str, member_id: str) -> None:
        with self._tx() as db:
            db.execute(
                "DELETE FROM members WHERE channel = ? AND grp = ? AND member_id = ?",
                (channel, group, member_id),
            )

    # -- events --------------------------------------------------------------------------
    def append(
        self,
        channel: str,
        events: Sequence[Event],
        next_offset: int,
        accepted_at: float,
        retire: Sequence[int] = (),
    ) -> None:
        base = self._base(channel)
        with self._tx() as db:
            db.executemany(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)",
                [(base | ev.offset, *_event_fields(ev)) for ev in events],
            )
            db.executemany(
                "INSERT INTO delivered VALUES (?, ?, ?)",
                [(base | ev.offset, ev.id, accepted_at) for ev in events],
            )
            db.execute(
                "UPDATE channels SET next_offset = MAX(next_offset, ?) WHERE id = ?",
                (next_offset, base >> OFFSET_BITS),
            )
            self._delete(db, channel, base, retire)

    def reinsert(self, channel: str, events: Sequence[Event]) -> None:
        base = self._base(channel)
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO events VALUES (?, ?, ?, ?, ?, ?)",
                [(base | ev.offset, *_event_fields(ev)) for ev in events],
            )

    def ack(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        if offsets:
            self._acked.add(channel)
            with self._tx() as db:
                db.executemany(
                    "INSERT OR IGNORE INTO acks VALUES (?, ?, ?)",
                    [(channel, group, o) for o in offsets],
                )

    def delete(self, channel: str, offsets: Sequence[int]) -> None:
        if offsets:
            base = self._base(channel)
            with self._tx() as db:
                self._delete(db, channel, base, offsets)

    def _delete(
        self, db: sqlite3.Connection, channel: str, base: int, offsets: Sequence[int]
    ) -> None:
        db.executemany(
            "DELETE FROM events WHERE key BETWEEN ? AND ?",
            [(base | first, base | last) for first, last in _runs(offsets)],
        )
        if channel in self._acked:  # acks exist only for channels with several groups
            db.executemany(
                "DELETE FROM acks WHERE channel = ? AND offset = ?", [(channel, o) for o in offsets]
            )

    def trim_delivered(self, channel: str, count: int) -> None:
        if count > 0:
            base = self._base(channel)
            with self._tx() as db:
                db.execute(
                    "DELETE FROM delivered WHERE key IN (SELECT key FROM delivered "
                    "WHERE key BETWEEN ? AND ? ORDER BY key LIMIT ?)",
                    (base, base | OFFSET_MASK, count),
                )

    def save_owners(
        self, channel: str, group: str, changes: dict[PartitionKey, str | None]
    ) -> None:
        gone = [(channel, group, *key) for key, owner in changes.items() if owner is None]
        owned = [(channel, group, *key, owner) for key, owner in changes.items() if owner]
        with self._tx() as db:
            db.executemany(
                "DELETE FROM owners WHERE channel = ? AND grp = ? AND "
                "publisher_id = ? AND partition = ?",
                gone,
            )
            db.executemany("INSERT OR REPLACE INTO owners VALUES (?, ?, ?, ?, ?)", owned)

    def add_dead_letters(self, channel: str, letters: Sequence[DeadLetterRecord]) -> None:
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO dead_letters VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (channel, d.group, d.event.offset, *_event_fields(d.event), d.error)
                    for d in letters
                ],
            )

    def remove_dead_letters(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        with self._tx() as db:
            db.executemany(
                "DELETE FROM dead_letters WHERE channel = ? AND grp = ? AND offset = ?",
                [(channel, group, o) for o in offsets],
            )

    # -- reading back --------------------------------------------------------------------
    def load(self, channel: str) -> ChannelSnapshot:
        snapshot = ChannelSnapshot()
        base = self._base(channel)
        key_range = (base, base | OFFSET_MASK)
        row = self._query("SELECT next_offset FROM channels WHERE name = ?", (channel,))
        snapshot.next_offset = row[0][0] if row else 0
        snapshot.groups = dict(
            self._query("SELECT name, created_offset FROM groups WHERE channel = ?", (channel,))
        )
        snapshot.members = [
            MemberRecord(channel, *r)
            for r in self._query(
                "SELECT grp, member_id, callback, prefetch FROM members WHERE channel = ? "
                "ORDER BY grp, member_id",
                (channel,),
            )
        ]
        snapshot.events = [
            _event(r[0] & OFFSET_MASK, r[1:])
            for r in self._query(
                f"SELECT key, {EVENT_COLUMNS} FROM events WHERE key BETWEEN ? AND ?", key_range
            )
        ]
        snapshot.events.sort(key=DELIVERY_ORDER)
        for group, offset in self._query(
            "SELECT grp, offset FROM acks WHERE channel = ?", (channel,)
        ):
            snapshot.acks.setdefault(group, set()).add(offset)
            self._acked.add(channel)
        snapshot.delivered = self._query(
            "SELECT id, accepted_at FROM delivered WHERE key BETWEEN ? AND ? ORDER BY key",
            key_range,
        )
        snapshot.dead_letters = [
            DeadLetterRecord(r[0], _event(r[1], r[2:7]), r[7])
            for r in self._query(
                f"SELECT grp, offset, {EVENT_COLUMNS}, error FROM dead_letters WHERE channel = ? "
                "ORDER BY offset",
                (channel,),
            )
        ]
        for group, publisher_id, partition, owner in self._query(
            "SELECT grp, publisher_id, partition, owner FROM owners WHERE channel = ?",
            (channel,),
        ):
            snapshot.owners.setdefault(group, {})[(publisher_id, partition)] = owner
        return snapshot

    def count(self, channel: str) -> int:
        base = self._base(channel)
        rows = self._query(
            "SELECT COUNT(*) FROM events WHERE key BETWEEN ? AND ?", (base, base | OFFSET_MASK)
        )
        return rows[0][0]

    def close(self) -> None:
        self._stop.set()
        if self._checkpointer is not None:
            self._checkpointer.join(BUSY_TIMEOUT_S)
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
        self._lock_file.close()


def _runs(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive offsets as (first, last) ranges: retirement is mostly in offset order, so
    a few range deletes replace many single-row ones."""
    runs: list[tuple[int, int]] = []
    for offset in sorted(set(offsets)):
        if runs and offset == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def _take_dir_lock(data_dir: Path) -> IO[str]:
    """Hold an exclusive lock on the data directory for the life of the store."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        handle = (data_dir / LOCK_FILE).open("a+")
    except OSError as exc:
        raise StoreError(str(data_dir), f"cannot use the data directory: {exc}") from None
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
