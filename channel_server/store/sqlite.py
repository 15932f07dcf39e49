"""The durable backup queue: SQLite in WAL mode under the broker's data directory.

One connection, guarded by ``_lock``, serves every channel of the broker. Each publish
batch is one transaction (group commit), and for batches up to ROWS_PER_STATEMENT events one
statement. Acks, deletes and window trims are deferred (see
:mod:`channel_server.store.base`) and written in one transaction every DEFERRED_INTERVAL_S
by the store's maintenance thread, which also checkpoints the WAL.

The delivered-ID window is the (publisher id, id) of the ``events`` rows and of the
``delivered`` rows from the channel's ``window_start`` on, in offset order: a delete copies
them from the events it removes into ``delivered`` (by offset ranges, off the publish
path), and a trim moves ``window_start`` forward. Delivered rows of schema 5 and before
have an empty publisher id: their channels keep ids unique per channel (``id_scope``).
With ``synchronous=NORMAL`` (the default) a committed transaction survives a process crash
(SIGKILL); FULL also survives power loss. A lock file keeps two brokers off one data
directory.

The data directory is private to the broker's user whatever the umask: 0700, and the
database, its WAL and shared-memory files and the lock file 0600 (SQLite gives the WAL and
shared-memory files the database's mode; they are checked once open too). A wider mode
left by an older broker is tightened at start, with a warning.
"""

from __future__ import annotations

import fcntl
import functools
import itertools
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from channel_server.core.queues import DELIVERY_ORDER
from channel_server.errors import StoreError
from channel_server.events import Event, PartitionKey
from channel_server.statefile import open_private_append, private_dir, tighten_private
from channel_server.store.base import (
    ChannelRecord,
    ChannelSnapshot,
    DeadLetterRecord,
    MemberRecord,
    Store,
)
from channel_server.store.deferred import DeferredWrites
from channel_server.store.rows import event_fields, event_from_row, loaded, pack, runs

log = logging.getLogger(__name__)
DB_FILE = "channels.sqlite"
LOCK_FILE = "broker.lock"
WAL_SUFFIXES = ("-wal", "-shm")
"""The files SQLite keeps next to the database in WAL mode (made when it is opened)."""
SCHEMA_VERSION = "6"
SYNC_LEVELS = ("OFF", "NORMAL", "FULL")
DEFAULT_SYNC = "NORMAL"
BUSY_TIMEOUT_S = 5.0
CHECKPOINT_INTERVAL_S = 1.0
DEFERRED_INTERVAL_S = 0.05
"""How often deferred acks, deletes and trims are written (and how stale they may be)."""
WAL_SIZE_LIMIT_BYTES = 64 << 20
"""After a checkpoint the WAL file is cut back to this size (it grows during bursts)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS channels(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, kind TEXT,
    next_offset INTEGER NOT NULL DEFAULT 0, window_start INTEGER NOT NULL DEFAULT 0,
    id_scope TEXT NOT NULL DEFAULT 'channel');
CREATE TABLE IF NOT EXISTS groups(
    channel TEXT NOT NULL, name TEXT NOT NULL, created_offset INTEGER NOT NULL,
    PRIMARY KEY(channel, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events(
    key INTEGER PRIMARY KEY, id TEXT NOT NULL, publisher_id TEXT NOT NULL, partition,
    timestamp REAL NOT NULL, payload, accepted_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS acks(
    channel TEXT NOT NULL, grp TEXT NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY(channel, grp, offset)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS delivered(
    key INTEGER PRIMARY KEY, id TEXT NOT NULL, accepted_at REAL NOT NULL,
    publisher_id TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS members(
    channel TEXT NOT NULL, grp TEXT NOT NULL, member_id TEXT NOT NULL,
    callback TEXT NOT NULL, prefetch INTEGER NOT NULL,
    user TEXT NOT NULL DEFAULT 'owner', secret TEXT NOT NULL DEFAULT '',
    PRIMARY KEY(channel, grp, member_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS owners(
    channel TEXT NOT NULL, grp TEXT NOT NULL, publisher_id TEXT NOT NULL, partition,
    owner TEXT NOT NULL, PRIMARY KEY(channel, grp, publisher_id, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_letters(
    channel TEXT NOT NULL, grp TEXT NOT NULL, offset INTEGER NOT NULL, id TEXT NOT NULL,
    publisher_id TEXT NOT NULL, partition, timestamp REAL NOT NULL, payload,
    error TEXT NOT NULL, PRIMARY KEY(channel, grp, offset)) WITHOUT ROWID;
"""
MIGRATIONS = {
    "2": ("ALTER TABLE events ADD COLUMN accepted_at REAL NOT NULL DEFAULT 0",),
    "3": (  # version 3 copied every id into delivered at publish time, by a trigger
        "DROP TRIGGER IF EXISTS events_delivered",
        "ALTER TABLE channels ADD COLUMN window_start INTEGER NOT NULL DEFAULT 0",
    ),
    "4": (  # version 5: a subscriber id's owning user, and its callback's secret
        ("members", "user", "TEXT NOT NULL DEFAULT 'owner'"),
        ("members", "secret", "TEXT NOT NULL DEFAULT ''"),
    ),
    "5": (  # version 6: id scopes (issue 13); channels from before keep channel-wide ids
        ("channels", "id_scope", "TEXT NOT NULL DEFAULT 'channel'"),
        ("delivered", "publisher_id", "TEXT NOT NULL DEFAULT ''"),
    ),
}
"""schema version -> the statements that bring it to the next one (one transaction); a
(table, column, type) adds that column unless the table has it (made new by SCHEMA)"""
WINDOW_KEYS = (
    "SELECT key FROM delivered WHERE key BETWEEN ?1 AND ?2 "
    "UNION SELECT key FROM events WHERE key BETWEEN ?1 AND ?2"
)
"""The window's keys in a key range, merged from two rowid scans (no sort, no temp table)."""
OFFSET_BITS = 40
"""events and delivered are keyed by ``channel id << OFFSET_BITS | offset``: one integer
primary key (SQLite's fastest), each channel a contiguous key range in offset order."""
OFFSET_MASK = (1 << OFFSET_BITS) - 1
EVENT_COLUMNS = "id, publisher_id, partition, timestamp, payload"
EVENT_ROW_WIDTH = 7
"""key, EVENT_COLUMNS, accepted_at"""
ROWS_PER_STATEMENT = 200
"""Rows per multi-row INSERT. The sqlite3 module lets go of the GIL for every statement it
steps, and getting it back can cost a thread switch while the channel lock is held: one
statement per batch instead of one per row keeps the publish path off that convoy."""
CACHED_STATEMENTS = 4 * ROWS_PER_STATEMENT
"""Room for the multi-row INSERTs of every batch size (per table) besides the rest."""
GROUP_TABLES = (("groups", "name"), ("acks", "grp"), ("owners", "grp"), ("dead_letters", "grp"))


class SQLiteStore(Store):
    durable = True

    def __init__(self, data_dir: Path, synchronous: str = DEFAULT_SYNC) -> None:
        """Open (or create) the store; raises StoreError with a clear reason when the
        directory is used by another broker or the database is damaged."""
        if synchronous.upper() not in SYNC_LEVELS:
            raise StoreError(str(data_dir), f"synchronous must be one of {SYNC_LEVELS}")
        self.path = Path(data_dir) / DB_FILE
        # The store lock. Guards _db (one connection for every channel and thread) and the
        #   row counts (_stored, _stored_changes). Taken under a channel lock (a publish
        #   commits under it) and after _writing_deferred; under it only the deferred
        #   writes' own lock is taken (count). Lock order: channel lock ->
        #   _writing_deferred -> _lock -> DeferredWrites._lock (docs/architecture.md).
        self._lock = threading.Lock()
        self._lock_file = _take_dir_lock(Path(data_dir))
        self._stop = threading.Event()
        self._maintainer: threading.Thread | None = None
        self._deferred = DeferredWrites()
        # The deferred-writes lock. Held while deferred writes are taken and written (by
        #   the maintenance thread, and by load, under a channel lock when a rebuild
        #   reloads), and by count: a reader never sees a batch taken but not committed.
        #   Taken before _lock, never under it.
        self._writing_deferred = threading.Lock()
        self._bases: dict[str, int] = {}
        """channel name -> key base; a channel's id never changes."""
        self._acked: set[str] = set()
        """Channels that have (or had) rows in ``acks``."""
        self._stored: dict[str, int] = {}
        """channel -> its events rows, from its first count on (guarded by _lock)."""
        self._stored_changes: dict[str, int] = {}
        """channel -> rows added (or removed) by the open transaction (guarded by _lock)."""
        try:
            open_private_append(self.path).close()  # 0600 before SQLite makes it
            _tighten_wal_files(self.path)
            self._db = self._open(synchronous.upper())
        except sqlite3.DatabaseError as exc:
            self._lock_file.close()
            raise StoreError(
                str(self.path),
                f"cannot be opened ({exc}); it may be damaged. "
                "Restore it from a backup or move it away to start empty",
            ) from None
        except BaseException:
            self._lock_file.close()
            raise

    def _open(self, synchronous: str) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_S,
            cached_statements=CACHED_STATEMENTS,
        )
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={synchronous}")
            if (check := db.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check}")
            db.executescript(SCHEMA)
            _migrate(db)
            db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run in their own thread
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
            _tighten_wal_files(self.path)  # made by now, with the database's mode
        except BaseException:
            db.close()
            raise
        self._maintainer = threading.Thread(
            target=self._maintenance_loop, name="sqlite-maintenance", daemon=True
        )
        self._maintainer.start()
        return db

    def _maintenance_loop(self) -> None:
        """Write the deferred writes every DEFERRED_INTERVAL_S, and copy the WAL into the
        database every CHECKPOINT_INTERVAL_S from a connection of its own, so no publish
        waits for a checkpoint's fsync."""
        checkpoints = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        rounds_per_checkpoint = max(1, round(CHECKPOINT_INTERVAL_S / DEFERRED_INTERVAL_S))
        failing = False  # log a failure once, and the recovery, not every round
        try:
            for round_no in itertools.count(1):
                if self._stop.wait(DEFERRED_INTERVAL_S):
                    return
                try:
                    self._write_deferred()
                    if round_no % rounds_per_checkpoint == 0:
                        checkpoints.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except (StoreError, sqlite3.Error) as exc:
                    if not failing:
                        log.error("background writes to %s fail (retrying): %s", self.path, exc)
                    failing = True
                    continue
                if failing:
                    log.warning("background writes to %s work again", self.path)
                failing = False
        finally:
            checkpoints.close()

    def _write_deferred(self) -> None:
        """Write every deferred ack, delete and trim in one transaction (put back if it
        fails, to be tried again)."""
        with self._writing_deferred:
            pending = self._deferred.take()
            if not pending:
                return
            try:
                bases = {c: self._base(c) for c in (*pending.deletes, *pending.trims)}
                with self._tx() as db:
                    if pending.acks:
                        self._acked.update(channel for channel, _, _ in pending.acks)
                        _insert(db, "INSERT OR IGNORE", "acks", 3, _flat(pending.acks))
                    for channel, offsets in pending.deletes.items():
                        removed = self._delete(db, channel, bases[channel], offsets)
                        self._stored_changes[channel] = -removed
                    for channel, count in pending.trims.items():
                        _trim(db, bases[channel], count)
            except BaseException:
                self._deferred.put_back(pending)
                raise

    @contextmanager
    def _tx(self, atomic: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction, under the lock; a failure rolls it back and says so. With
        ``atomic=False`` the caller runs a single statement, which is its own transaction
        (one step, so the GIL is let go once instead of three times)."""
        with self._lock:
            try:
                if atomic:
                    self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                if atomic:
                    self._db.execute("COMMIT")
                for channel, change in self._stored_changes.items():
                    if channel in self._stored:
                        self._stored[channel] += change
            except BaseException as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(str(self.path), str(exc)) from exc
                raise
            finally:
                self._stored_changes.clear()

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- channels, groups, members -------------------------------------------------------
    def save_channel(self, record: ChannelRecord) -> None:
        base = self._base(record.name)
        with self._tx() as db:
            db.execute(
                "UPDATE channels SET kind = ?, id_scope = ? WHERE id = ? AND kind IS NULL",
                (record.kind, record.id_scope, base >> OFFSET_BITS),
            )

    def channels(self) -> list[ChannelRecord]:
        rows = self._query(
            "SELECT name, kind, id_scope FROM channels WHERE kind IS NOT NULL ORDER BY id"
        )
        return [ChannelRecord(*row) for row in rows]

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
        self._write_deferred()  # its deferred acks first, or they would outlive it
        with self._tx() as db:
            for table, column in GROUP_TABLES:
                db.execute(
                    f"DELETE FROM {table} WHERE channel = ? AND {column} = ?", (channel, group)
                )

    def save_member(self, record: MemberRecord) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO members VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    record.channel,
                    record.group,
                    record.member_id,
                    record.callback,
                    record.prefetch,
                    record.user,
                    record.secret,
                ),
            )

    def remove_member(self, channel: str, group: str, member_id: str) -> None:
        with self._tx() as db:
            db.execute(
                "DELETE FROM members WHERE channel = ? AND grp = ? AND member_id = ?",
                (channel, group, member_id),
            )

    # -- events --------------------------------------------------------------------------
    def append(
        self, channel: str, events: Sequence[Event], next_offset: int, accepted_at: float
    ) -> None:
        if not events:
            return
        base = self._base(channel)
        params = _event_params(base, events, accepted_at)
        # The channel's next offset is stored only when it is not the last event's + 1
        # (load takes the largest key otherwise); usually one INSERT is the transaction.
        gap = next_offset != events[-1].offset + 1  # accepted events ascend by offset
        with self._tx(atomic=gap or len(events) > ROWS_PER_STATEMENT) as db:
            _insert(db, "INSERT", "events", EVENT_ROW_WIDTH, params)
            self._stored_changes[channel] = len(events)
            if gap:
                db.execute(
                    "UPDATE channels SET next_offset = MAX(next_offset, ?) WHERE id = ?",
                    (next_offset, base >> OFFSET_BITS),
                )

    def reinsert(self, channel: str, events: Sequence[Event], accepted_at: float) -> None:
        self._write_deferred()  # a replayed event may be waiting for its delete
        base = self._base(channel)
        params = _event_params(base, events, accepted_at)
        with self._tx() as db:
            _insert(db, "INSERT OR REPLACE", "events", EVENT_ROW_WIDTH, params)
            self._stored.pop(channel, None)  # counted again: a replaced row is no new one

    def ack(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        self._deferred.ack(channel, group, offsets)

    def delete(self, channel: str, offsets: Sequence[int]) -> None:
        self._deferred.delete(channel, offsets)

    def trim_delivered(self, channel: str, count: int) -> None:
        if count > 0:
            self._deferred.trim(channel, count)

    def _delete(
        self, db: sqlite3.Connection, channel: str, base: int, offsets: Sequence[int]
    ) -> int:
        """Delete the events (keeping their ids in the window); returns how many were."""
        ranges = [(base | first, base | last) for first, last in runs(offsets)]
        db.executemany(  # the ids stay in the window (see the module's docstring)
            "INSERT OR IGNORE INTO delivered(key, id, accepted_at, publisher_id) "
            "SELECT key, id, accepted_at, publisher_id FROM events WHERE key BETWEEN ? AND ?",
            ranges,
        )
        removed = db.executemany("DELETE FROM events WHERE key BETWEEN ? AND ?", ranges).rowcount
        if channel in self._acked:  # acks exist only for channels with several groups
            db.execute(
                "DELETE FROM acks WHERE channel = ? AND offset IN (SELECT value FROM json_each(?))",
                (channel, _json_list(offsets)),
            )
        return removed

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
            rows = [
                (channel, d.group, d.event.offset, *event_fields(d.event), d.error) for d in letters
            ]
            _insert(db, "INSERT OR REPLACE", "dead_letters", len(rows[0]), _flat(rows))

    def remove_dead_letters(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        with self._tx() as db:
            db.executemany(
                "DELETE FROM dead_letters WHERE channel = ? AND grp = ? AND offset = ?",
                [(channel, group, o) for o in offsets],
            )

    # -- reading back --------------------------------------------------------------------
    def load(self, channel: str) -> ChannelSnapshot:
        self._write_deferred()
        snapshot = ChannelSnapshot()
        base = self._base(channel)
        key_range = (base, base | OFFSET_MASK)
        snapshot.next_offset = self._next_offset(base)
        snapshot.groups = dict(
            self._query("SELECT name, created_offset FROM groups WHERE channel = ?", (channel,))
        )
        snapshot.members = [
            MemberRecord(channel, *r)
            for r in self._query(
                "SELECT grp, member_id, callback, prefetch, user, secret FROM members "
                "WHERE channel = ? "
                "ORDER BY grp, member_id",
                (channel,),
            )
        ]
        rows = self._query(
            f"SELECT key, {EVENT_COLUMNS}, accepted_at FROM events WHERE key BETWEEN ? AND ?",
            key_range,
        )
        snapshot.events = [
            loaded(i, pub, part, ts, p, key & OFFSET_MASK) for key, i, pub, part, ts, p, _ in rows
        ]
        snapshot.delivered = self._window(base, rows)
        del rows  # a restart's peak memory
        snapshot.events.sort(key=DELIVERY_ORDER)
        for group, offset in self._query(
            "SELECT grp, offset FROM acks WHERE channel = ?", (channel,)
        ):
            snapshot.acks.setdefault(group, set()).add(offset)
            self._acked.add(channel)
        snapshot.dead_letters = [
            DeadLetterRecord(r[0], event_from_row(r[1], r[2:7]), r[7])
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

    def _window(self, base: int, event_rows: list[tuple]) -> list[tuple[str, str, float]]:
        """The delivered window, oldest first: (publisher id, id, accepted at) of the
        delivered rows and of the events rows just read (key, id, publisher id first,
        accepted_at last), from window_start on. The events rows are reused: reading a
        long backlog again cost 0.7 s per million."""
        with self._lock:
            first = base | _window_start(self._db, base)
        window = self._query(
            "SELECT key, publisher_id, id, accepted_at FROM delivered WHERE key BETWEEN ? AND ?",
            (first, base | OFFSET_MASK),
        )
        copied = len(window)
        window += [(row[0], row[2], row[1], row[-1]) for row in event_rows if row[0] >= first]
        window.sort()  # two sorted runs: one merge
        if copied:  # a replayed dead letter (or schema 3) has a row in both tables: once
            return list({key: (pub, i, at) for key, pub, i, at in window}.values())
        return [(pub, event_id, accepted_at) for _, pub, event_id, accepted_at in window]

    def _next_offset(self, base: int) -> int:
        """The stored next offset, or past the last event or delivered id if larger (an
        append stores it only when it is not the last event's + 1)."""
        key_range = (base, base | OFFSET_MASK)
        (next_offset,) = self._query(
            "SELECT MAX((SELECT next_offset FROM channels WHERE id = ?), "
            "IFNULL((SELECT MAX(key) - ? + 1 FROM events WHERE key BETWEEN ? AND ?), 0), "
            "IFNULL((SELECT MAX(key) - ? + 1 FROM delivered WHERE key BETWEEN ? AND ?), 0))",
            (base >> OFFSET_BITS, base, *key_range, base, *key_range),
        )[0]
        return next_offset

    def count(self, channel: str) -> int:
        """Stored events less those whose delete is deferred: counted once, then kept up to
        date by every write, so a stats poll costs no scan of a long backlog and no write.
        """
        base = self._base(channel)
        with self._writing_deferred, self._lock:  # not between a take and its commit
            stored = self._stored.get(channel)
            if stored is None:
                stored = self._stored[channel] = self._db.execute(
                    "SELECT COUNT(*) FROM events WHERE key BETWEEN ? AND ?",
                    (base, base | OFFSET_MASK),
                ).fetchone()[0]
            return max(0, stored - self._deferred.deleting(channel))

    def close(self) -> None:
        self._stop.set()
        if self._maintainer is not None:
            self._maintainer.join(BUSY_TIMEOUT_S)
        self._write_deferred()
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
        self._lock_file.close()


def _migrate(db: sqlite3.Connection) -> None:
    """Bring a database written by an older broker to SCHEMA_VERSION (or refuse it)."""
    db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
    (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    while version in MIGRATIONS:
        db.execute("BEGIN IMMEDIATE")  # a failure rolls back: the file keeps its version
        for statement in MIGRATIONS[version]:
            if isinstance(statement, tuple):
                table, column, kind = statement
                if column in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                    continue
                statement = f"ALTER TABLE {table} ADD COLUMN {column} {kind}"
            db.execute(statement)
        version = str(int(version) + 1)
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (version,))
        db.execute("COMMIT")
        log.info("store schema upgraded to version %s", version)
    if version != SCHEMA_VERSION:
        raise sqlite3.DatabaseError(
            f"written with store schema {version}, this broker reads {SCHEMA_VERSION}"
        )


def _trim(db: sqlite3.Connection, base: int, count: int) -> None:
    """Forget the ``count`` oldest ids of the window: move window_start past them (to the
    next id's offset, or past the last one), save the next offset that may carry, and
    delete the delivered rows below it."""
    start = _window_start(db, base)
    key_range = (base | start, base | OFFSET_MASK)
    kept = db.execute(f"{WINDOW_KEYS} ORDER BY key LIMIT 1 OFFSET ?3", (*key_range, count))
    row = kept.fetchone()
    if row is not None:
        new_start = row[0] - base
    else:  # every id goes: the window starts after the last one
        lasts = db.execute(
            "SELECT (SELECT MAX(key) FROM delivered WHERE key BETWEEN ?1 AND ?2), "
            "(SELECT MAX(key) FROM events WHERE key BETWEEN ?1 AND ?2)",
            key_range,
        ).fetchone()
        known = [key - base for key in lasts if key is not None]
        new_start = max(known) + 1 if known else start
    if new_start <= start:
        return
    db.execute(
        "UPDATE channels SET window_start = ?1, next_offset = MAX(next_offset, ?1) WHERE id = ?2",
        (new_start, base >> OFFSET_BITS),
    )
    db.execute("DELETE FROM delivered WHERE key BETWEEN ? AND ?", (base, base | new_start - 1))


def _window_start(db: sqlite3.Connection, base: int) -> int:
    """The offset of the oldest id the channel's delivered window still holds."""
    cid = base >> OFFSET_BITS
    return db.execute("SELECT window_start FROM channels WHERE id = ?", (cid,)).fetchone()[0]


def _insert(db: sqlite3.Connection, verb: str, table: str, width: int, params: list) -> None:
    """``verb INTO table`` of rows given as one flat list of ``width`` values each,
    ROWS_PER_STATEMENT rows per statement."""
    step = width * ROWS_PER_STATEMENT
    for start in range(0, len(params), step):
        chunk = params if len(params) <= step else params[start : start + step]
        db.execute(_insert_sql(verb, table, width, len(chunk) // width), chunk)


def _flat(rows: Iterable[tuple]) -> list:
    return list(itertools.chain.from_iterable(rows))


def _event_params(base: int, events: Iterable[Event], accepted_at: float) -> list:
    """The flat INSERT parameters of events rows, in one loop: this is the publish path,
    and a tuple per row then a flattening cost as much again (measured)."""
    params: list = []
    for ev in events:
        payload = ev.payload
        params += (
            base | ev.offset,
            ev.id,
            ev.publisher_id,
            ev.partition,
            ev.timestamp,
            payload if type(payload) is str else pack(payload),
            accepted_at,
        )
    return params


@functools.lru_cache(maxsize=CACHED_STATEMENTS)
def _insert_sql(verb: str, table: str, width: int, rows: int) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return f"{verb} INTO {table} VALUES " + ", ".join([row] * rows)


def _json_list(values: Iterable[int]) -> str:
    """Integers as one JSON array parameter: a whole set in one statement (json_each)."""
    return json.dumps(list(values))


def _tighten_wal_files(db_path: Path) -> None:
    for suffix in WAL_SUFFIXES:
        tighten_private(db_path.with_name(db_path.name + suffix))


def _take_dir_lock(data_dir: Path) -> IO[str]:
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
