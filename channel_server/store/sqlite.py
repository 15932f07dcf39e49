"""The durable backup queue: SQLite in WAL mode under the broker's data directory.

One connection, guarded by ``_lock``, serves every channel of the broker. Each publish
batch is one transaction (group commit), and for batches up to ROWS_PER_STATEMENT events one
statement. Acks, deletes and window trims are deferred (see
:mod:`channel_server.store.base`) and written in one transaction every DEFERRED_INTERVAL_S
by the store's maintenance thread, which also checkpoints the WAL.

With ``synchronous=NORMAL`` (the default) a committed transaction survives a process crash
(SIGKILL); FULL also survives power loss. The delivered-ID window: :mod:`.sqlite_sql`; the
files, their modes and the lock that keeps two brokers off one data directory:
:mod:`.sqlite_files`.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from channel_server.errors import StoreError
from channel_server.events import Event, PartitionKey
from channel_server.private_files import open_private_append
from channel_server.store.base import (
    ChannelRecord,
    ChannelSnapshot,
    DeadLetterRecord,
    MemberRecord,
    Store,
)
from channel_server.store.deferred import DeferredWrites, write_in_background
from channel_server.store.rows import GROUP_TABLES, event_fields
from channel_server.store.sqlite_files import (
    DB_FILE,
    LOCK_FILE,
    open_db,
    take_dir_lock,
    tighten_wal_files,
)
from channel_server.store.sqlite_reads import read_payloads, read_snapshot
from channel_server.store.sqlite_sql import (
    EVENT_ROW_WIDTH,
    OFFSET_BITS,
    OFFSET_MASK,
    OWNER_ROW_WIDTH,
    ROWS_PER_STATEMENT,
    delete_events,
    event_params,
    flat,
    insert,
    trim,
)

__all__ = ["DB_FILE", "DEFAULT_SYNC", "LOCK_FILE", "SYNC_LEVELS", "SQLiteStore"]
log = logging.getLogger(__name__)
SYNC_LEVELS = ("OFF", "NORMAL", "FULL")
DEFAULT_SYNC = "NORMAL"
BUSY_TIMEOUT_S = 5.0
CHECKPOINT_INTERVAL_S = 1.0
DEFERRED_INTERVAL_S = 0.05
"""How often deferred acks, deletes and trims are written (and how stale they may be)."""


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
        self._lock_file = take_dir_lock(Path(data_dir))
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
            tighten_wal_files(self.path)
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
        db = open_db(self.path, synchronous, BUSY_TIMEOUT_S)
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

        def write(round_no: int) -> None:
            self._write_deferred()
            if round_no % rounds_per_checkpoint == 0:
                checkpoints.execute("PRAGMA wal_checkpoint(PASSIVE)")

        try:
            write_in_background(
                self._stop, DEFERRED_INTERVAL_S, write, self.path, (StoreError, sqlite3.Error)
            )
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
                        insert(db, "INSERT OR IGNORE", "acks", 3, flat(pending.acks))
                    for channel, offsets in pending.deletes.items():
                        removed = delete_events(
                            db, channel, bases[channel], offsets, channel in self._acked
                        )
                        self._stored_changes[channel] = -removed
                    for channel, count in pending.trims.items():
                        trim(db, bases[channel], count)
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
        self._write_deferred()  # its last acks first: its partitions go to others now
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
        params = event_params(base, events, accepted_at)
        # The channel's next offset is stored only when it is not the last event's + 1
        # (load takes the largest key otherwise); usually one INSERT is the transaction.
        gap = next_offset != events[-1].offset + 1  # accepted events ascend by offset
        with self._tx(atomic=gap or len(events) > ROWS_PER_STATEMENT) as db:
            insert(db, "INSERT", "events", EVENT_ROW_WIDTH, params)
            self._stored_changes[channel] = len(events)
            if gap:
                db.execute(
                    "UPDATE channels SET next_offset = MAX(next_offset, ?) WHERE id = ?",
                    (next_offset, base >> OFFSET_BITS),
                )

    def reinsert(self, channel: str, events: Sequence[Event], accepted_at: float) -> None:
        self._write_deferred()  # a replayed event may be waiting for its delete
        base = self._base(channel)
        params = event_params(base, events, accepted_at)
        with self._tx() as db:
            insert(db, "INSERT OR REPLACE", "events", EVENT_ROW_WIDTH, params)
            self._stored.pop(channel, None)  # counted again: a replaced row is no new one

    def ack(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        self._deferred.ack(channel, group, offsets)

    def delete(self, channel: str, offsets: Sequence[int]) -> None:
        self._deferred.delete(channel, offsets)

    def trim_delivered(self, channel: str, count: int) -> None:
        if count > 0:
            self._deferred.trim(channel, count)

    def save_owners(
        self,
        channel: str,
        group: str,
        changes: dict[PartitionKey, str | None],
        *,
        opened: bool = False,
    ) -> None:
        if not opened:  # the acks that let a partition move go first (see Store)
            self._write_deferred()
        gone = [(channel, group, *key) for key, owner in changes.items() if owner is None]
        owned = [(channel, group, *key, owner) for key, owner in changes.items() if owner]
        with self._tx() as db:
            db.executemany(
                "DELETE FROM owners WHERE channel = ? AND grp = ? AND "
                "publisher_id = ? AND partition = ?",
                gone,
            )
            if owned:
                insert(db, "INSERT OR REPLACE", "owners", OWNER_ROW_WIDTH, flat(owned))

    def add_dead_letters(self, channel: str, letters: Sequence[DeadLetterRecord]) -> None:
        with self._tx() as db:
            rows = [
                (channel, d.group, d.event.offset, *event_fields(d.event), d.error) for d in letters
            ]
            insert(db, "INSERT OR REPLACE", "dead_letters", len(rows[0]), flat(rows))

    def remove_dead_letters(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        with self._tx() as db:
            db.executemany(
                "DELETE FROM dead_letters WHERE channel = ? AND grp = ? AND offset = ?",
                [(channel, group, o) for o in offsets],
            )

    # -- reading back --------------------------------------------------------------------
    def load(self, channel: str, payload_budget: int | None = None) -> ChannelSnapshot:
        self._write_deferred()
        snapshot = read_snapshot(self._query, self._base(channel), channel, payload_budget)
        if snapshot.acks:
            self._acked.add(channel)
        return snapshot

    def payloads(self, channel: str, offsets: Sequence[int]) -> dict[int, Any]:
        return read_payloads(self._query, self._base(channel), offsets)

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
