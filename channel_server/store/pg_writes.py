"""The PostgreSQL store's writes: each a fenced transaction (see :mod:`.postgres`), and the
deferred batch (acks, deletes, window trims) written in one.

The delivered window is kept as in the SQLite store: a delete copies the ids of the events
it removes into ``delivered``, a trim moves the channel's ``window_start`` forward.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from channel_server.events import Event, PartitionKey
from channel_server.store.base import DeadLetterRecord, MemberRecord
from channel_server.store.deferred import PendingWrites
from channel_server.store.pg_schema import FENCE_CTE, decode_part, encode_part
from channel_server.store.rows import CHANNEL_TABLES, GROUP_TABLES, loaded, pack, unpack

CHANNEL_ROWS = ("events", "delivered", *CHANNEL_TABLES)
"""Every table with rows of a channel (by its id): what deleting a channel deletes."""
EVENT_COLUMNS = "channel, ofs, id, publisher_id, part, ts, is_text, payload"
APPEND = (
    FENCE_CTE + ", bump AS (UPDATE channels SET next_offset = GREATEST(next_offset, %(next)s) "
    "WHERE id = %(cid)s AND %(gap)s AND EXISTS (SELECT 1 FROM fence)) "
    f"INSERT INTO events ({EVENT_COLUMNS}, accepted_at) "
    "SELECT %(cid)s, u.* , %(at)s FROM fence, unnest(%(ofs)b::bigint[], %(ids)b::bytea[], "
    "%(pubs)b::text[], %(parts)b::bytea[], %(ts)b::float8[], %(texts)b::bool[], "
    "%(payloads)b::bytea[]) AS u"
)
"""One publish batch: one statement (its own transaction: one round trip), fenced; the
channel's next offset stored too when it is not the last event's + 1. The columns go as
binary arrays (%b): against a transaction with COPY, 2.4x the events/s for a batch of one,
1.25x for 100, the same for 500 (scripts/bench_pg.py)."""
REINSERT = (
    f"INSERT INTO events ({EVENT_COLUMNS}, accepted_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (channel, ofs) DO UPDATE SET "
    "id = EXCLUDED.id, publisher_id = EXCLUDED.publisher_id, part = EXCLUDED.part, "
    "ts = EXCLUDED.ts, is_text = EXCLUDED.is_text, payload = EXCLUDED.payload, "
    "accepted_at = EXCLUDED.accepted_at"
)
ADD_DEAD_LETTER = (
    "INSERT INTO dead_letters (channel, grp, ofs, id, publisher_id, part, ts, is_text, payload, "
    "error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (channel, grp, ofs) DO UPDATE SET id = EXCLUDED.id, "
    "publisher_id = EXCLUDED.publisher_id, part = EXCLUDED.part, ts = EXCLUDED.ts, "
    "is_text = EXCLUDED.is_text, payload = EXCLUDED.payload, error = EXCLUDED.error"
)


def event_row(cid: int, ev: Event) -> tuple:
    """(channel, ofs, id, publisher id, part, ts, is_text, payload) of an event."""
    stored = pack(ev.payload)
    is_text = type(stored) is str
    payload = stored.encode("utf-8") if is_text else stored
    return (cid, ev.offset, ev.id.encode("utf-8"), ev.publisher_id, encode_part(ev.partition),
            ev.timestamp, is_text, payload)  # fmt: skip


def _stored(is_text: bool, payload: Any) -> Any:
    """The is_text and payload columns as :func:`~channel_server.store.rows.pack` gave
    the payload: a string, or msgpack bytes."""
    return bytes(payload).decode("utf-8") if is_text else bytes(payload)


def stored_payload(is_text: bool, payload: Any) -> Any:
    """A payload as :func:`event_row` stored it."""
    return unpack(_stored(is_text, payload))


def loaded_event(offset: int, row: Sequence[Any]) -> Event:
    """An event from (id, publisher id, part, ts, is_text, payload) as stored."""
    event_id, publisher_id, part, ts, is_text, payload = row
    stored = _stored(is_text, payload)
    return loaded(bytes(event_id).decode("utf-8"), publisher_id, decode_part(part), ts, stored,
                  offset)  # fmt: skip


def _append_args(events: Sequence[Event], next_offset: int, accepted_at: float) -> dict:
    """APPEND's parameters: a column array each."""
    rows = [event_row(0, ev) for ev in events]
    columns = list(zip(*rows, strict=True))
    names = ("ofs", "ids", "pubs", "parts", "ts", "texts", "payloads")
    args: dict[str, Any] = {name: list(col) for name, col in zip(names, columns[1:], strict=True)}
    gap = next_offset != events[-1].offset + 1  # accepted events ascend by offset
    return args | {"next": next_offset, "gap": gap, "at": accepted_at}


class PgWrites:
    """The fenced writes of PostgresStore (which provides ``_tx`` and the counts)."""

    _changes: dict[str, int]
    _stored: dict[str, int]
    _epochs: dict[str, int]
    _ids: dict[str, int]
    _lock: threading.Lock
    broker_id: str

    def _tx(
        self, channel: str | None = None, atomic: bool = True
    ) -> AbstractContextManager[tuple[Any, int]]:
        raise NotImplementedError

    def _write_deferred(self) -> None:
        raise NotImplementedError

    def _refused(self, cur: Any, channel: str, epoch: int) -> Exception:
        raise NotImplementedError

    def append(
        self, channel: str, events: Sequence[Event], next_offset: int, accepted_at: float
    ) -> None:
        if not events:
            return
        args = _append_args(events, next_offset, accepted_at)
        args |= {"channel": channel, "me": self.broker_id, "epoch": self._epochs.get(channel, 0)}
        with self._tx(channel, atomic=False) as (cur, cid):
            cur.execute(APPEND, args | {"cid": cid})
            if cur.rowcount != len(events):
                raise self._refused(cur, channel, args["epoch"])
            self._changes[channel] = len(events)

    def reinsert(self, channel: str, events: Sequence[Event], accepted_at: float) -> None:
        self._write_deferred()  # a replayed event may be waiting for its delete
        with self._tx(channel) as (cur, cid):
            cur.executemany(REINSERT, [(*event_row(cid, ev), accepted_at) for ev in events])
            self._stored.pop(channel, None)  # counted again: a replaced row is no new one

    def save_group(self, channel: str, group: str, created_offset: int) -> None:
        with self._tx(channel) as (cur, cid):
            cur.execute(
                "INSERT INTO groups VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (cid, group, created_offset),
            )

    def remove_channel(self, channel: str) -> None:
        self._write_deferred()  # its deferred writes first, or they would outlive it
        with self._tx(channel) as (cur, cid):  # fenced: only while its lease is ours
            for table in CHANNEL_ROWS:
                cur.execute(f"DELETE FROM {table} WHERE channel = %s", (cid,))
            cur.execute("DELETE FROM channels WHERE id = %s", (cid,))
            cur.execute("DELETE FROM channel_leases WHERE channel = %s", (channel,))
        with self._lock:
            for known in (self._ids, self._stored, self._epochs):
                known.pop(channel, None)

    def remove_group(self, channel: str, group: str) -> None:
        self._write_deferred()  # its deferred acks first, or they would outlive it
        with self._tx(channel) as (cur, cid):
            for table, column in GROUP_TABLES:
                cur.execute(
                    f"DELETE FROM {table} WHERE channel = %s AND {column} = %s", (cid, group)
                )

    def save_member(self, record: MemberRecord) -> None:
        with self._tx(record.channel) as (cur, cid):
            cur.execute(
                "INSERT INTO members VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (channel, grp, member_id) DO UPDATE SET "
                "callback = EXCLUDED.callback, prefetch = EXCLUDED.prefetch, "
                "owner_user = EXCLUDED.owner_user, secret = EXCLUDED.secret",
                (cid, record.group, record.member_id, record.callback, record.prefetch,
                 record.user, record.secret),
            )  # fmt: skip

    def remove_member(self, channel: str, group: str, member_id: str) -> None:
        self._write_deferred()  # its last acks first: its partitions go to others now
        with self._tx(channel) as (cur, cid):
            cur.execute(
                "DELETE FROM members WHERE channel = %s AND grp = %s AND member_id = %s",
                (cid, group, member_id),
            )

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
        with self._tx(channel) as (cur, cid):
            gone = [(cid, group, pub, encode_part(p)) for (pub, p), o in changes.items() if not o]
            owned = [(cid, group, pub, encode_part(p), o) for (pub, p), o in changes.items() if o]
            cur.executemany(
                "DELETE FROM owners WHERE channel = %s AND grp = %s AND publisher_id = %s "
                "AND part = %s",
                gone,
            )
            cur.executemany(
                "INSERT INTO owners VALUES (%s, %s, %s, %s, %s) ON CONFLICT "
                "(channel, grp, publisher_id, part) DO UPDATE SET owner = EXCLUDED.owner",
                owned,
            )

    def add_dead_letters(self, channel: str, letters: Sequence[DeadLetterRecord]) -> None:
        with self._tx(channel) as (cur, cid):
            rows = []
            for d in letters:
                c, ofs, *fields = event_row(cid, d.event)
                rows.append((c, d.group, ofs, *fields, d.error.replace("\x00", "\\x00")))
            cur.executemany(ADD_DEAD_LETTER, rows)

    def remove_dead_letters(self, channel: str, group: str, offsets: Sequence[int]) -> None:
        with self._tx(channel) as (cur, cid):
            cur.execute(
                "DELETE FROM dead_letters WHERE channel = %s AND grp = %s AND ofs = ANY(%s)",
                (cid, group, list(offsets)),
            )

    # -- the deferred batch ----------------------------------------------------------------
    def write_batch(self, cur: Any, pending: PendingWrites, cids: dict[str, int]) -> None:
        """Acks, then deletes (their ids kept in the window, their acks dropped), then
        trims, in the caller's transaction."""
        cur.executemany(
            "INSERT INTO acks VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            [(cids[c], group, ofs) for c, group, ofs in pending.acks],
        )
        for channel, offsets in pending.deletes.items():
            args = (cids[channel], sorted(set(offsets)))
            cur.execute(
                "INSERT INTO delivered SELECT channel, ofs, id, publisher_id, accepted_at "
                "FROM events WHERE channel = %s AND ofs = ANY(%s) ON CONFLICT DO NOTHING",
                args,
            )
            removed = cur.execute(
                "DELETE FROM events WHERE channel = %s AND ofs = ANY(%s)", args
            ).rowcount
            cur.execute("DELETE FROM acks WHERE channel = %s AND ofs = ANY(%s)", args)
            self._changes[channel] = self._changes.get(channel, 0) - removed
        for channel, count in pending.trims.items():
            _trim(cur, cids[channel], count)


def _trim(cur: Any, cid: int, count: int) -> None:
    """Forget the ``count`` oldest ids of the window: move window_start past them (to the
    next id's offset, or past the last one), save the next offset that may carry, and
    delete the delivered rows below it."""
    (start,) = cur.execute("SELECT window_start FROM channels WHERE id = %s", (cid,)).fetchone()
    keys = {"c": cid, "s": start, "n": count}
    row = cur.execute(
        "SELECT ofs FROM (SELECT ofs FROM delivered WHERE channel = %(c)s AND ofs >= %(s)s "
        "UNION SELECT ofs FROM events WHERE channel = %(c)s AND ofs >= %(s)s) k "
        "ORDER BY ofs OFFSET %(n)s LIMIT 1",
        keys,
    ).fetchone()
    if row is not None:
        new_start = row[0]
    else:  # every id goes: the window starts after the last one
        (last,) = cur.execute(
            "SELECT GREATEST((SELECT MAX(ofs) FROM delivered WHERE channel = %(c)s "
            "AND ofs >= %(s)s), (SELECT MAX(ofs) FROM events WHERE channel = %(c)s "
            "AND ofs >= %(s)s))",
            keys,
        ).fetchone()
        new_start = start if last is None else last + 1
    if new_start <= start:
        return
    cur.execute(
        "UPDATE channels SET window_start = %(w)s, next_offset = GREATEST(next_offset, %(w)s) "
        "WHERE id = %(c)s",
        {"w": new_start, "c": cid},
    )
    cur.execute("DELETE FROM delivered WHERE channel = %s AND ofs < %s", (cid, new_start))
