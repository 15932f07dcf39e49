"""The durable backup queue: SQLite in WAL mode under the broker's data directory.

One connection, guarded by ``_lock``, serves every channel of the broker. A publish batch
is one record appended to the journal (:mod:`.journal`): durable when it is written, like
a commit. Acks, deletes and window trims are deferred (see
:mod:`channel_server.store.base`) and written in one transaction every DEFERRED_INTERVAL_S
by the store's maintenance thread, which also checkpoints the WAL. That round resolves the
journaled events acknowledged meanwhile (their ids go into the delivered window; they never
become rows) and moves into ``events`` those that waited MOVE_AFTER_S (:mod:`.journaled`).

With ``synchronous=NORMAL`` (the default) a committed transaction survives a process crash
(SIGKILL); FULL also survives power loss. The delivered-ID window: :mod:`.sqlite_sql`; the
files, their modes and the lock that keeps two brokers off one data directory:
:mod:`.sqlite_files`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from channel_server.errors import StoreError
from channel_server.events import Event, PartitionKey
from channel_server.private_files import open_private_append
from channel_server.store.base import (
    SESSIONS_KEY,
    SESSIONS_PER_LIFE,
    ChannelRecord,
    ChannelSnapshot,
    DeadLetterRecord,
    MemberRecord,
    Store,
)
from channel_server.store.deferred import DeferredWrites, PendingWrites, write_in_background
from channel_server.store.journal import (
    DAMAGED_SUFFIX,
    Journal,
    pack_record,
    read_records,
    segments,
)
from channel_server.store.journaled import JournaledEvents
from channel_server.store.rows import CHANNEL_TABLES, GROUP_TABLES, event_fields
from channel_server.store.sqlite_files import (
    DB_FILE,
    LOCK_FILE,
    FilesWatch,
    open_db,
    take_dir_lock,
    tighten_wal_files,
    unopened,
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
    forget_acks,
    insert,
    keep_journaled_ids,
    keep_next_offset,
    move_journaled,
    restore_record,
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
TRIM_INTERVAL_S = 1.0
"""Window trims are written at most this often: each moves every journaled event into
rows first, and reads the oldest ids of the window. Ids kept a moment longer only make a
restart's window a little longer (it expires to its bounds once restored)."""
JOURNAL_MEMORY_BYTES = 2 << 20
"""While more than this many bytes of events (``Event.size``) wait in the journal only, a
publish is written as rows at once, as before the journal: subscribers are not keeping
up, so its events would only wait to be moved, holding their payloads (the queues make a
long backlog's payloads cold) and fragmenting memory: a million queued without
subscribers cost 332 B each with no bound, 304 with 4 MiB, 297 with 2 MiB (287 before
the journal). The default workload holds less than 2 MiB (none of its 1,001 publishes went
to rows; with 1 MiB, 23 did)."""
MOVE_AFTER_S = 0.25
"""How long a published event may wait in the journal only before it becomes a row: an
event acknowledged sooner (most are, within milliseconds) is never one; its id alone goes
into the delivered window. Longer keeps the journal's files longer, and a payload the
queues made cold in memory until it moves."""


KEYED_TABLES = ("events", "delivered", "delivered_runs")
"""Tables keyed by a channel's key base plus an offset: deleted by its key range."""


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
        self._journaled = JournaledEvents()
        """Published events in the journal only (guarded by _lock)."""
        self._closed: list[int] = []
        """Journal segments no longer appended to, not yet done (guarded by _lock)."""
        self._purge: list[int] = []
        """Segments deleted whose journal_done rows the next round removes (_lock)."""
        self._journaled_next: dict[str, int] = {}
        """channel -> the next offset its last journaled publish gave (_lock)."""
        self._next_trim = 0.0
        """When deferred trims may be written next (_writing_deferred)."""
        try:
            open_private_append(self.path).close()  # 0600 before SQLite makes it
            tighten_wal_files(self.path)
            self._db = open_db(self.path, synchronous.upper(), BUSY_TIMEOUT_S)
            self._files = FilesWatch(self.path)
            self._files_gone: str | None = None
            """Why the store's files are not the ones it writes (set by each round):
            publishes are refused meanwhile, and no journal segment is deleted."""
            self._journal = Journal(
                Path(data_dir), sync=synchronous.upper() == "FULL", after=self._replay()
            )
            self._start_maintenance()
        except sqlite3.DatabaseError as exc:
            self._lock_file.close()
            raise StoreError(str(self.path), unopened(exc, Path(data_dir))) from None
        except BaseException:
            self._lock_file.close()
            raise

    def _start_maintenance(self) -> None:
        self._maintainer = threading.Thread(
            target=self._maintenance_loop, name="sqlite-maintenance", daemon=True
        )
        self._maintainer.start()

    def _replay(self) -> int:
        """Bring what a past life left in the journal into the database (a crash, or a
        close that could not finish): every event of a segment not marked done, unless
        the delivered window has it (acknowledged already). Returns the highest segment
        number seen, so new segments never reuse one."""
        done = {row[0] for row in self._db.execute("SELECT segment FROM journal_done")}
        found = segments(self.path.parent)
        for number, path in found:
            damaged: list[int] = []
            if number not in done:
                with self._tx() as db:
                    for record in read_records(path, damaged):
                        restore_record(db, record)
                    db.execute("INSERT OR IGNORE INTO journal_done VALUES (?)", (number,))
                log.info("replayed journal segment %s", path.name)
            if damaged:
                kept = path.with_name(path.name + DAMAGED_SUFFIX)
                path.rename(kept)
                log.error(
                    "journal segment %s is damaged at byte %d (changed on disk after it was "
                    "written): the events of the %d bytes from there are lost unless their "
                    "publishers send them again; it is kept as %s",
                    path.name,
                    damaged[0],
                    kept.stat().st_size - damaged[0],
                    kept.name,
                )
            else:
                path.unlink()
        with self._tx() as db:
            db.execute("DELETE FROM journal_done")
        return max([*done, *(number for number, _ in found)], default=0)

    def _maintenance_loop(self) -> None:
        """Write the deferred writes every DEFERRED_INTERVAL_S, and copy the WAL into the
        database every CHECKPOINT_INTERVAL_S from a connection of its own, so no publish
        waits for a checkpoint's fsync."""
        checkpoints = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        rounds_per_checkpoint = max(1, round(CHECKPOINT_INTERVAL_S / DEFERRED_INTERVAL_S))

        def write(round_no: int) -> None:
            intact = self._files_intact()  # each round: publishes may wait on it
            self._write_deferred()
            if not intact or round_no % rounds_per_checkpoint == 0:
                # a WAL removed: its frames into the database at once, while that is there
                checkpoints.execute("PRAGMA wal_checkpoint(PASSIVE)")

        try:
            retried = (StoreError, sqlite3.Error, OSError)  # the journal's files too
            write_in_background(self._stop, DEFERRED_INTERVAL_S, write, self.path, retried)
        finally:
            checkpoints.close()

    def _write_deferred(self, move_all: bool = False) -> None:
        """Write every deferred ack, delete and trim (put back if it fails, to be tried
        again), resolving and moving journaled events (every one: ``move_all``), then
        delete the journal segments that no event waits in.

        A round with trims moves every journaled event first, and trims in a transaction
        of its own after marking the segments done: a segment replayed after a crash then
        never holds an acknowledged event whose id a trim forgot (it would come back).
        Trims wait for TRIM_INTERVAL_S since the last (but for ``move_all``)."""
        with self._writing_deferred:
            pending = self._deferred.take()
            if pending.trims and not move_all and time.monotonic() < self._next_trim:
                self._deferred.put_back(PendingWrites(trims=pending.trims))  # not yet
                pending.trims = {}
            try:
                self._apply(pending, move_all or bool(pending.trims))
            except BaseException:
                self._deferred.put_back(pending)
                raise
            if pending.trims:
                try:
                    self._trim(pending.trims)
                except BaseException:
                    self._deferred.put_back(PendingWrites(trims=pending.trims))
                    raise
                self._next_trim = time.monotonic() + TRIM_INTERVAL_S

    def _apply(self, pending: PendingWrites, move_all: bool) -> None:
        """Acks, deletes and journal moves in one round's transaction (:meth:`_round`)."""
        cutoff = None if move_all else time.monotonic() - MOVE_AFTER_S
        with self._lock:
            if not (pending or self._journal.is_open or self._closed or self._purge):
                return
        taken: list[tuple[str, list[Event]]] = []
        nexts: dict[str, int] = {}
        try:
            with self._round() as db:
                if pending.acks:
                    self._acked.update(channel for channel, _, _ in pending.acks)
                    insert(db, "INSERT OR IGNORE", "acks", 3, flat(pending.acks))
                for channel, offsets in pending.deletes.items():
                    self._delete(db, channel, offsets, taken)
                moving = self._journaled.take_older(cutoff)
                taken += moving.items()  # before writing: a failure puts them back
                for channel, events in moving.items():
                    move_journaled(db, self._bases[channel], events)
                nexts = dict(self._journaled_next)
                for channel, next_offset in nexts.items():
                    keep_next_offset(db, self._bases[channel], next_offset)
        except BaseException:
            with self._lock:  # not written: they wait again
                for channel, events in taken:
                    self._journaled.put_back(channel, events)
            raise
        with self._lock:
            for channel, next_offset in nexts.items():
                if self._journaled_next.get(channel) == next_offset:
                    del self._journaled_next[channel]

    @contextmanager
    def _round(self) -> Iterator[sqlite3.Connection]:
        """A maintenance round's transaction: the journal's segments idle since the last
        round are marked done in it, and deleted once it commits (a failure leaves them
        closed, to be marked again)."""
        idle: list[int] = []
        try:
            with self._tx() as db:
                idle = self._mark_idle(db)
                yield db
        except BaseException:
            with self._lock:
                self._closed.extend(idle)
            raise
        if not self._files_intact():
            return  # the marks went where no name leads: a restart replays the segments
        self._delete_segments(idle)

    def _files_intact(self) -> bool:
        """Whether the database and its WAL are still the files written (logged when
        that changes)."""
        gone, was = self._files.missing(), self._files_gone
        if gone and not was:
            log.critical(
                "%s: refusing publishes and keeping the journal's segments (what SQLite "
                "writes there now would be lost at a crash); restart the broker",
                gone,
            )
        elif was and not gone:
            log.warning("the store's files are back (%s no longer holds)", was)
        self._files_gone = gone
        return gone is None

    def _delete(
        self,
        db: sqlite3.Connection,
        channel: str,
        offsets: list[int],
        taken: list[tuple[str, list[Event]]],
    ) -> None:
        """Events every group acknowledged, in the open transaction: rows are deleted
        (their ids kept in the window); journaled events only have their ids kept. Those
        are taken out of the events waiting, and added to ``taken`` first: a failure puts
        them back."""
        base = self._bases[channel]
        journaled, elsewhere = self._journaled.take(channel, offsets)
        taken.append((channel, journaled))
        removed = 0
        if journaled:
            keep_journaled_ids(db, base, journaled)
            if channel in self._acked:
                forget_acks(db, channel, [ev.offset for ev in journaled])
            removed += len(journaled)
        if elsewhere:
            removed += delete_events(db, channel, base, elsewhere, channel in self._acked)
        self._stored_changes[channel] = self._stored_changes.get(channel, 0) - removed

    def _mark_idle(self, db: sqlite3.Connection) -> list[int]:
        """In the open transaction: close the current segment, mark the closed ones no
        event waits in as done, and drop the marks of segments deleted before."""
        if (closed := self._journal.rotate()) is not None:
            self._closed.append(closed)
        idle = self._journaled.idle_segments(self._closed)
        self._closed = [s for s in self._closed if s not in idle]
        insert(db, "INSERT OR IGNORE", "journal_done", 1, idle)
        if self._purge:
            db.execute(
                "DELETE FROM journal_done WHERE segment IN (SELECT value FROM json_each(?))",
                (json.dumps(self._purge),),
            )
            self._purge = []
        return idle

    def _delete_segments(self, idle: list[int]) -> None:
        """Delete segments marked done; a mark is dropped only once its file is gone (a
        segment left without one would be replayed by a restart)."""
        deleted = []
        for segment in idle:
            try:
                self._journal.remove(segment)
            except OSError as exc:
                log.warning("journal segment %d not deleted (a restart will): %s", segment, exc)
                continue
            deleted.append(segment)
        with self._lock:
            self._purge.extend(deleted)

    def _trim(self, trims: dict[str, int]) -> None:
        bases = {c: self._base(c) for c in trims}
        with self._round() as db:
            for channel, count in trims.items():
                trim(db, bases[channel], count)

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
    def claim_sessions(self, channel: str, at_least: int) -> int:
        key = SESSIONS_KEY + channel
        with self._tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            first = max(at_least, int(row[0]) if row else 0)
            claimed = first + SESSIONS_PER_LIFE
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, claimed))
        return first

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

    def remove_channel(self, channel: str) -> None:
        self._write_deferred(move_all=True)  # its journaled events rows, its writes done
        base = self._base(channel)
        with self._tx() as db:
            for table in CHANNEL_TABLES:
                db.execute(f"DELETE FROM {table} WHERE channel = ?", (channel,))
            for table in KEYED_TABLES:  # (keys base + offset: its own range)
                db.execute(
                    f"DELETE FROM {table} WHERE key BETWEEN ? AND ?", (base, base + OFFSET_MASK)
                )
            db.execute("DELETE FROM channels WHERE name = ?", (channel,))
        with self._lock:
            for known in (self._bases, self._stored, self._journaled_next):
                known.pop(channel, None)
            self._acked.discard(channel)

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
        if gone := self._files_gone:
            raise StoreError(str(self.path), f"{gone}: refusing publishes; restart the broker")
        base = self._base(channel)
        if self._journaled.bytes > JOURNAL_MEMORY_BYTES:  # (read without the lock: a hint)
            self._append_rows(channel, base, events, next_offset, accepted_at)
            return
        if events[0].accepted_at != accepted_at:  # (the channel's events have it already)
            events = [replace(ev, accepted_at=accepted_at) for ev in events]
        record = pack_record(base, next_offset, events)
        with self._lock:
            try:
                segment = self._journal.append(record)
            except OSError as exc:
                # A record cut short must stay the segment's last: the next starts anew.
                if (closed := self._journal.rotate()) is not None:
                    self._closed.append(closed)
                raise StoreError(str(self.path.parent), f"journal write failed: {exc}") from exc
            self._journaled.add(channel, segment, time.monotonic(), events)
            self._journaled_next[channel] = next_offset
            if channel in self._stored:
                self._stored[channel] += len(events)

    def _append_rows(
        self,
        channel: str,
        base: int,
        events: Sequence[Event],
        next_offset: int,
        accepted_at: float,
    ) -> None:
        """A publish as rows in one transaction (the channel's next offset too, when it
        is not the last event's + 1: load takes the largest key otherwise)."""
        params = event_params(base, events, accepted_at)
        gap = next_offset != events[-1].offset + 1  # accepted events ascend by offset
        with self._tx(atomic=gap or len(events) > ROWS_PER_STATEMENT) as db:
            insert(db, "INSERT", "events", EVENT_ROW_WIDTH, params)
            self._stored_changes[channel] = len(events)
            if gap:
                keep_next_offset(db, base, next_offset)

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

    def write_deferred_now(self) -> None:
        self._write_deferred()

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
        self._write_deferred(move_all=True)  # every event a row, to be read back
        snapshot = read_snapshot(self._query, self._base(channel), channel, payload_budget)
        if snapshot.acks:
            self._acked.add(channel)
        return snapshot

    def payloads(self, channel: str, offsets: Sequence[int]) -> dict[int, Any]:
        base = self._base(channel)
        with self._lock:
            journaled = self._journaled.payloads(channel, offsets)
        rest = [offset for offset in offsets if offset not in journaled]
        return (read_payloads(self._query, base, rest) if rest else {}) | journaled

    def count(self, channel: str) -> int:
        """Stored events less those whose delete is deferred: counted once, then kept up to
        date by every write, so a stats poll costs no scan of a long backlog and no write.
        """
        base = self._base(channel)
        with self._writing_deferred, self._lock:  # not between a take and its commit
            stored = self._stored.get(channel)
            if stored is None:
                rows = self._db.execute(
                    "SELECT COUNT(*) FROM events WHERE key BETWEEN ? AND ?",
                    (base, base | OFFSET_MASK),
                ).fetchone()[0]
                stored = self._stored[channel] = rows + self._journaled.count(channel)
            return max(0, stored - self._deferred.deleting(channel))

    def close(self) -> None:
        self._stop.set()
        if self._maintainer is not None:
            self._maintainer.join(BUSY_TIMEOUT_S)
        self._write_deferred(move_all=True)
        self._write_deferred()  # the journal's last segments are done: deleted
        with self._lock:
            self._journal.close()
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
        self._lock_file.close()
