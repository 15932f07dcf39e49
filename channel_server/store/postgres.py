"""The durable backup queue in PostgreSQL, shared by several brokers (failover).

The store contract of :mod:`channel_server.store.base` with SQLite's semantics (one
transaction per publish batch, acks, deletes and window trims deferred and written together
every ``deferred_interval_s``, the delivered window kept as in SQLite), plus the leases of
:mod:`channel_server.store.leases`: each channel is written by the broker holding its lease,
and every write transaction first checks that lease, by the database's clock, with the epoch
this store took it at (:data:`~channel_server.store.pg_schema.FENCE`). A broker that lost the
lease (frozen past it, or the channel moved) gets ``LeaseLost`` and writes nothing; its
deferred writes for the channel are dropped (losing them is safe, see base).

One connection, guarded by ``_lock``, serves every channel, opened again when it broke;
the leases have one of their own (``_lease_lock``), so a renewal never waits behind a long
statement of a channel (a restore reading a big backlog) until the term runs out.
Lock order: channel lock -> _writing_deferred -> _lock -> DeferredWrites._lock;
``_lease_lock`` is taken with none of them held and takes none.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from channel_server.errors import LeaseLost, StoreError
from channel_server.store import pg_schema as sql
from channel_server.store.base import (
    SESSIONS_KEY,
    SESSIONS_PER_LIFE,
    ChannelRecord,
    ChannelSnapshot,
    Store,
)
from channel_server.store.deferred import DeferredWrites, PendingWrites, write_in_background
from channel_server.store.dsn import describe
from channel_server.store.leases import Lease
from channel_server.store.pg_reads import read_snapshot
from channel_server.store.pg_writes import PgWrites, stored_payload

log = logging.getLogger(__name__)
IDLE_IN_TRANSACTION_SHARE = 0.5
"""Of a lease term: how long a transaction may sit idle (see PostgresConfig.lease_s)."""


@dataclass(frozen=True)
class PostgresConfig:
    connect_timeout_s: int = 5
    """How long opening a connection may take (libpq counts whole seconds)."""
    statement_timeout_s: float = 30.0
    """The longest one statement may run or wait for a lock."""
    deferred_interval_s: float = 0.05
    """How often deferred acks, deletes and trims are written (and how stale they may be)."""
    lease_s: float = 6.0
    """The term of a new channel's lease (the broker's ``--lease``; it renews it). A session
    of this store left idle inside a transaction for half of it is closed by the server
    (``idle_in_transaction_session_timeout``), its locks with it: a broker frozen between
    two statements of a write would otherwise hold its lease row ``FOR SHARE`` and keep
    every take-over waiting until it woke."""

    @property
    def idle_in_transaction_s(self) -> float:
        return self.lease_s * IDLE_IN_TRANSACTION_SHARE


class PostgresStore(PgWrites, Store):
    durable = True

    def __init__(self, dsn: str, broker_id: str, config: PostgresConfig | None = None) -> None:
        """Connect, make the tables on first use; StoreError (no password in it) when the
        database cannot be reached or was written by another schema version."""
        try:
            import psycopg
            import psycopg.conninfo
        except ImportError:
            raise StoreError(
                describe(dsn),
                "psycopg is not installed: install the postgres extra "
                "(pip install 'pubsub-channels[postgres]')",
            ) from None
        self._psycopg = psycopg
        try:
            self._password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
        except psycopg.Error:  # its message may quote the DSN: not shown
            raise StoreError(describe(dsn), "not a valid PostgreSQL DSN") from None
        self.broker_id = broker_id
        self.config = config or PostgresConfig()
        self.where = describe(dsn)
        self._dsn = dsn
        # Guards _conn, _ids, _stored, _changes and changes to _epochs (a write peeks at it
        #   first, unlocked: the database has the last word). Order: the module docstring.
        self._lock = threading.Lock()
        # Held while deferred writes are taken and written, and by count.
        self._writing_deferred = threading.Lock()
        self._deferred = DeferredWrites()
        self._epochs: dict[str, int] = {}
        """channel -> the epoch of the lease this store holds (its fencing token)."""
        self._ids: dict[str, int] = {}
        self._stored: dict[str, int] = {}
        self._changes: dict[str, int] = {}
        self._conn: Any = None
        # Guards _lease_conn: the leases' statements (acquire, renew, release, leases).
        self._lease_lock = threading.Lock()
        self._lease_conn: Any = None
        with self._lock:
            conn = self._connection()
            found = self._guard(lambda: sql.create_schema(conn))
        if found is not None:
            conn.close()
            raise StoreError(
                self.where,
                f"written with store schema {found}, this broker reads {sql.SCHEMA_VERSION}",
            )
        self._stop = threading.Event()
        self._maintainer = threading.Thread(
            target=self._maintenance_loop, name="postgres-maintenance", daemon=True
        )
        self._maintainer.start()

    # -- connection and transactions ---------------------------------------------------
    def _connection(self) -> Any:
        """The channels' connection (opened again when it broke); call under _lock."""
        self._conn = self._opened(self._conn)
        return self._conn

    def _lease_connection(self) -> Any:
        """The leases' connection (opened again when it broke); call under _lease_lock."""
        self._lease_conn = self._opened(self._lease_conn, "leases")
        return self._lease_conn

    def _opened(self, conn: Any, role: str = "") -> Any:
        """``conn``, or a new connection when there is none or it broke."""
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        timeout_ms = int(self.config.statement_timeout_s * 1000)
        idle_ms = int(self.config.idle_in_transaction_s * 1000)
        name = f"channel_server {self.broker_id} {role}".rstrip()
        return self._guard(
            lambda: self._psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=self.config.connect_timeout_s,
                options=(
                    f"-c statement_timeout={timeout_ms} "
                    f"-c idle_in_transaction_session_timeout={idle_ms}"
                ),
                application_name=name[:63],
            )
        )

    def _guard(self, call: Any) -> Any:
        """Run ``call``; a database error becomes a StoreError without the password."""
        try:
            return call()
        except self._psycopg.Error as exc:
            raise StoreError(self.where, self._redacted(str(exc))) from exc

    def _redacted(self, message: str) -> str:
        password = self._password
        return message.replace(str(password), "***") if password else message

    @contextmanager
    def _tx(self, channel: str | None = None, atomic: bool = True) -> Iterator[tuple[Any, int]]:
        """One transaction under the lock, yielding (cursor, channel id); with a channel it
        is fenced first (LeaseLost, nothing written, unless this store holds its lease).
        With ``atomic=False`` the caller runs one statement, its own transaction, which
        fences itself (:data:`~.pg_schema.FENCE_CTE`, then :meth:`_refused`): one round
        trip instead of four on the publish path."""
        if channel is not None and channel not in self._epochs:
            raise LeaseLost(channel)
        with self._lock:
            conn = self._connection()
            try:
                cid = self._cid(conn, channel) if channel is not None else 0
                with conn.transaction() if atomic else nullcontext():
                    cur = conn.cursor()
                    if atomic and channel is not None and not self._fenced(cur, channel):
                        raise LeaseLost(channel)
                    yield cur, cid
                for name, change in self._changes.items():
                    if name in self._stored:
                        self._stored[name] += change
            except self._psycopg.Error as exc:
                raise StoreError(self.where, self._redacted(str(exc))) from exc
            finally:
                self._changes.clear()

    def _fenced(self, cur: Any, channel: str) -> bool:
        """Whether this store still holds the channel's live lease (locking it FOR SHARE
        to the end of the transaction); forgets its epoch when another took it over."""
        epoch = self._epochs.get(channel)
        if epoch is None:
            return False
        if cur.execute(sql.FENCE, (channel, self.broker_id, epoch)).fetchone():
            return True
        self._refused(cur, channel, epoch)
        return False

    def _refused(self, cur: Any, channel: str, epoch: int) -> LeaseLost:
        """The error of a write the fence refused; the epoch is forgotten when another
        broker took the lease (not when it only expired: a renewal may keep it)."""
        if not cur.execute(sql.STILL_OURS, (channel, self.broker_id, epoch)).fetchone():
            if self._epochs.get(channel) == epoch:
                del self._epochs[channel]
            log.warning("lease of channel %s lost (epoch %d): writes refused", channel, epoch)
        return LeaseLost(channel)

    def _cid(self, conn: Any, channel: str) -> int:
        """The channel's row id, the row made on first use (its own statement, so a
        transaction rolled back never leaves a remembered id behind)."""
        cid = self._ids.get(channel)
        if cid is None:
            conn.execute(
                "INSERT INTO channels (name) VALUES (%s) ON CONFLICT (name) DO NOTHING",
                (channel,),
            )
            row = conn.execute("SELECT id FROM channels WHERE name = %s", (channel,)).fetchone()
            cid = self._ids[channel] = row[0]
        return cid

    def _query(self, statement: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[tuple]:
        with self._lock:
            conn = self._connection()
            return self._guard(lambda: conn.execute(statement, args).fetchall())

    def _held(self, channel: str) -> None:
        if channel not in self._epochs:
            raise LeaseLost(channel)

    # -- leases (channel_server.store.leases.LeaseStore) ---------------------------------
    def _on_lease_connection(self, call: Callable[[Any], Any]) -> Any:
        """``call(connection)`` on the leases' connection, under its lock."""
        with self._lease_lock:
            conn = self._lease_connection()
            return self._guard(lambda: call(conn))

    def acquire(self, channel: str, ttl_s: float) -> Lease | None:
        args = {"channel": channel, "me": self.broker_id, "ttl": ttl_s}
        rows = self._on_lease_connection(lambda c: c.execute(sql.ACQUIRE, args).fetchall())
        with self._lock:
            if not rows:
                self._epochs.pop(channel, None)
                return None
            lease = Lease(*rows[0])
            if self._epochs.get(channel) != lease.epoch:
                self._stored.pop(channel, None)  # another broker may have written since
            self._epochs[channel] = lease.epoch
            return lease

    def renew(self, channel: str, epoch: int, ttl_s: float) -> bool:
        args = (ttl_s, channel, self.broker_id, epoch)
        if self._on_lease_connection(lambda c: c.execute(sql.RENEW, args).rowcount) == 1:
            return True
        with self._lock:
            if self._epochs.get(channel) == epoch:
                del self._epochs[channel]
        return False

    def release(self, channel: str, epoch: int, handoff_to: str | None = None) -> None:
        self._write_deferred()  # what this broker acknowledged lands before it lets go
        args = {"channel": channel, "me": self.broker_id, "epoch": epoch, "to": handoff_to}
        with self._lock:  # a write in flight ends first; later ones find no epoch
            if self._epochs.get(channel) == epoch:
                del self._epochs[channel]
        self._on_lease_connection(lambda c: c.execute(sql.RELEASE, args))

    def leases(self) -> list[Lease]:
        rows = self._on_lease_connection(lambda c: c.execute(sql.LEASES).fetchall())
        return [Lease(*row) for row in rows]

    # -- channels ------------------------------------------------------------------------
    def claim_sessions(self, channel: str, at_least: int) -> int:
        args = {"key": SESSIONS_KEY + channel, "at_least": at_least, "n": SESSIONS_PER_LIFE}
        with self._tx() as (cur, _):
            (first,) = cur.execute(sql.CLAIM_SESSIONS, args).fetchone()
        return int(first)

    def save_channel(self, record: ChannelRecord) -> None:
        """A new channel is created with its lease taken by this broker (epoch 1) in the
        same transaction; an existing one is left as it is (idempotent)."""
        with self._tx() as (cur, _):
            created = cur.execute(
                "INSERT INTO channels (name, kind, id_scope) VALUES (%s, %s, %s) "
                "ON CONFLICT (name) DO UPDATE SET kind = EXCLUDED.kind, "
                "id_scope = EXCLUDED.id_scope WHERE channels.kind IS NULL RETURNING id",
                (record.name, record.kind, record.id_scope),
            ).fetchone()
            if created:
                cur.execute(sql.CREATE_LEASE, (record.name, self.broker_id, self.config.lease_s))
                if cur.rowcount == 1:
                    self._epochs[record.name] = 1

    def channels(self) -> list[ChannelRecord]:
        rows = self._query(
            "SELECT name, kind, id_scope FROM channels WHERE kind IS NOT NULL ORDER BY id"
        )
        return [ChannelRecord(*row) for row in rows]

    # -- deferred writes -----------------------------------------------------------------
    def ack(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        self._held(channel)
        self._deferred.ack(channel, group, offsets)

    def delete(self, channel: str, offsets: Sequence[int]) -> None:
        self._held(channel)
        self._deferred.delete(channel, offsets)

    def write_deferred_now(self) -> None:
        self._write_deferred()

    def trim_delivered(self, channel: str, count: int) -> None:
        self._held(channel)
        if count > 0:
            self._deferred.trim(channel, count)

    def _maintenance_loop(self) -> None:
        """Write the deferred writes every deferred_interval_s until close."""
        write_in_background(
            self._stop,
            self.config.deferred_interval_s,
            lambda _round: self._write_deferred(),
            self.where,
            (StoreError,),
        )

    def _write_deferred(self) -> None:
        """Write every deferred ack, delete and trim in one transaction, each channel's
        fenced: a lost channel's are dropped, an expired but not yet taken one's kept for
        later; the whole lot is put back when the transaction fails."""
        with self._writing_deferred:
            pending = self._deferred.take()
            if not pending:
                return
            try:
                later = self._write_pending(pending)
            except BaseException:
                self._deferred.put_back(pending)
                raise
            if later:
                self._deferred.put_back(later)

    def _write_pending(self, pending: PendingWrites) -> PendingWrites:
        names = {c for c, _, _ in pending.acks} | set(pending.deletes) | set(pending.trims)
        held = {c for c in names if c in self._epochs}
        with self._lock:  # outside the transaction (see _cid)
            conn = self._connection()
            cids = self._guard(lambda: {c: self._cid(conn, c) for c in held})
        with self._tx() as (cur, _):
            allowed = {c for c in held if self._fenced(cur, c)}
            self.write_batch(cur, _only(pending, allowed), cids)
        kept = {c for c in held - allowed if c in self._epochs}  # expired, still ours
        return _only(pending, kept)

    # -- reading back --------------------------------------------------------------------
    def load(self, channel: str, payload_budget: int | None = None) -> ChannelSnapshot:
        self._write_deferred()
        with self._lock:
            conn = self._connection()
            return self._guard(
                lambda: read_snapshot(conn, self._cid(conn, channel), channel, payload_budget)
            )

    def payloads(self, channel: str, offsets: Sequence[int]) -> dict[int, Any]:
        with self._lock:
            conn = self._connection()
            rows = self._guard(
                lambda: conn.execute(
                    "SELECT ofs, is_text, payload FROM events WHERE channel = %s AND ofs = ANY(%s)",
                    (self._cid(conn, channel), list(offsets)),
                ).fetchall()
            )
        return {ofs: stored_payload(is_text, payload) for ofs, is_text, payload in rows}

    def count(self, channel: str) -> int:
        """Stored events less those whose delete is deferred; counted once, then kept up
        to date by this store's writes (a stats poll scans no backlog)."""
        with self._writing_deferred, self._lock:
            stored = self._stored.get(channel)
            if stored is None:
                conn = self._connection()
                row = self._guard(
                    lambda: conn.execute(
                        "SELECT COUNT(*) FROM events e JOIN channels c ON c.id = e.channel "
                        "WHERE c.name = %s",
                        (channel,),
                    ).fetchone()
                )
                stored = self._stored[channel] = row[0]
            return max(0, stored - self._deferred.deleting(channel))

    def close(self) -> None:
        """Write what is deferred, disconnect; leases stay (released by the broker, or expire)."""
        self._stop.set()
        self._maintainer.join(self.config.statement_timeout_s)
        try:
            self._write_deferred()
        finally:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
            with self._lease_lock:
                if self._lease_conn is not None:
                    self._lease_conn.close()


def _only(pending: PendingWrites, channels: set[str]) -> PendingWrites:
    """The part of a batch of deferred writes that is for these channels."""
    return PendingWrites(
        [a for a in pending.acks if a[0] in channels],
        {c: o for c, o in pending.deletes.items() if c in channels},
        {c: n for c, n in pending.trims.items() if c in channels},
    )
