"""Reading a channel back from the PostgreSQL store (``load``): one transaction, the
events in delivery order, the delivered window merged as in the SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from channel_server.core.queues import DELIVERY_ORDER
from channel_server.core.spill import cold_past
from channel_server.events import Event
from channel_server.store.base import ChannelSnapshot, DeadLetterRecord, MemberRecord
from channel_server.store.pg_schema import decode_part
from channel_server.store.pg_writes import loaded_event
from channel_server.store.rows import PAGE_ROWS


def read_snapshot(
    conn: Any, cid: int, channel: str, payload_budget: int | None = None
) -> ChannelSnapshot:
    """Everything stored for one channel, read in one transaction; the events past
    ``payload_budget`` bytes (in offset order) come back cold (see :func:`cold_past`)."""
    snap = ChannelSnapshot()
    with conn.transaction():
        snap.next_offset, window_start = conn.execute(
            "SELECT GREATEST(next_offset, (SELECT MAX(ofs) + 1 FROM events WHERE channel = "
            "%(c)s), (SELECT MAX(ofs) + 1 FROM delivered WHERE channel = %(c)s)), "
            "window_start FROM channels WHERE id = %(c)s",
            {"c": cid},
        ).fetchone()
        snap.groups = dict(
            conn.execute(
                "SELECT name, created_offset FROM groups WHERE channel = %s", (cid,)
            ).fetchall()
        )
        snap.members = [
            MemberRecord(channel, *row)
            for row in conn.execute(
                "SELECT grp, member_id, callback, prefetch, owner_user, secret FROM members "
                'WHERE channel = %s ORDER BY grp COLLATE "C", member_id COLLATE "C"',
                (cid,),
            )
        ]
        ids: list[tuple] = []
        snap.events = list(cold_past(_events(conn, cid, window_start, ids), payload_budget))
        window = conn.execute(
            "SELECT ofs, publisher_id, id, accepted_at FROM delivered "
            "WHERE channel = %s AND ofs >= %s ORDER BY ofs",
            (cid, window_start),
        ).fetchall()
        snap.delivered = _window(window, ids)
        del ids
        for group, offset in conn.execute("SELECT grp, ofs FROM acks WHERE channel = %s", (cid,)):
            snap.acks.setdefault(group, set()).add(offset)
        snap.dead_letters = [
            DeadLetterRecord(row[0], loaded_event(row[1], row[2:8]), row[8])
            for row in conn.execute(
                "SELECT grp, ofs, id, publisher_id, part, ts, is_text, payload, error "
                'FROM dead_letters WHERE channel = %s ORDER BY ofs, grp COLLATE "C"',
                (cid,),
            )
        ]
        for group, publisher_id, part, owner in conn.execute(
            "SELECT grp, publisher_id, part, owner FROM owners WHERE channel = %s", (cid,)
        ):
            snap.owners.setdefault(group, {})[(publisher_id, decode_part(part))] = owner
    snap.events.sort(key=DELIVERY_ORDER)
    return snap


def _events(conn: Any, cid: int, first: int, ids: list[tuple]) -> Iterator[Event]:
    """The channel's stored events in offset order, streamed from a server-side cursor
    (a page of rows at a time); appends (ofs, publisher id, id, accepted at) of each from
    offset ``first`` (the window's start) on to ``ids``."""
    with conn.cursor(name="restore_events") as cursor:
        cursor.itersize = PAGE_ROWS
        cursor.execute(
            "SELECT ofs, id, publisher_id, part, ts, is_text, payload, accepted_at "
            "FROM events WHERE channel = %s ORDER BY ofs",
            (cid,),
        )
        for row in cursor:
            ev = loaded_event(row[0], row[1:7])
            if row[0] >= first:
                ids.append((row[0], ev.publisher_id, ev.id, row[7]))
            yield ev


def _window(delivered: list[tuple], event_ids: list[tuple]) -> list[tuple[str, str, float]]:
    """The delivered window, oldest first, from the delivered rows (ofs, publisher id, id,
    accepted at) and the events just read (the same four); an id in both (a replayed
    dead letter) once, as in the SQLite store."""
    merged = [(o, p, bytes(i).decode(), at) for o, p, i, at in delivered]
    merged += event_ids
    merged.sort()
    return list({o: (p, i, at) for o, p, i, at in merged}.values())
