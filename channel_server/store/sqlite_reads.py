"""Reading a channel back from the SQLite store (``load``), one query at a time: each
takes the store's lock on its own, so a long restore lets other channels write between."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from channel_server.core.queues import DELIVERY_ORDER
from channel_server.core.spill import cold_past
from channel_server.events import Event
from channel_server.store.base import ChannelSnapshot, DeadLetterRecord, MemberRecord
from channel_server.store.rows import PAGE_ROWS, event_from_row, loaded, unpack
from channel_server.store.sqlite_sql import (
    EVENT_COLUMNS,
    OFFSET_BITS,
    OFFSET_MASK,
    RUNS_FROM,
    json_list,
    run_rows,
)

Query = Callable[[str, Sequence[Any]], list[tuple]]
"""The store's ``_query``: one statement under its lock, every row."""


def read_snapshot(
    query: Query, base: int, channel: str, payload_budget: int | None = None
) -> ChannelSnapshot:
    """Everything stored for the channel whose key base is ``base``; the events past
    ``payload_budget`` bytes (in offset order) come back cold (see :func:`cold_past`)."""
    snapshot = ChannelSnapshot()
    snapshot.next_offset = next_offset(query, base)
    snapshot.groups = dict(
        query("SELECT name, created_offset FROM groups WHERE channel = ?", (channel,))
    )
    snapshot.members = [
        MemberRecord(channel, *r)
        for r in query(
            "SELECT grp, member_id, callback, prefetch, user, secret FROM members "
            "WHERE channel = ? "
            "ORDER BY grp, member_id",
            (channel,),
        )
    ]
    ((start,),) = query("SELECT window_start FROM channels WHERE id = ?", (base >> OFFSET_BITS,))
    first = base | start  # the key of the oldest id the delivered window keeps
    ids: list[tuple] = []
    snapshot.events = list(cold_past(_events(query, base, first, ids), payload_budget))
    snapshot.delivered = window(query, base, first, ids)
    del ids  # a restart's peak memory
    snapshot.events.sort(key=DELIVERY_ORDER)
    for group, offset in query("SELECT grp, offset FROM acks WHERE channel = ?", (channel,)):
        snapshot.acks.setdefault(group, set()).add(offset)
    snapshot.dead_letters = [
        DeadLetterRecord(r[0], event_from_row(r[1], r[2:7]), r[7])
        for r in query(
            f"SELECT grp, offset, {EVENT_COLUMNS}, error FROM dead_letters WHERE channel = ? "
            "ORDER BY offset",
            (channel,),
        )
    ]
    for group, publisher_id, partition, owner in query(
        "SELECT grp, publisher_id, partition, owner FROM owners WHERE channel = ?",
        (channel,),
    ):
        snapshot.owners.setdefault(group, {})[(publisher_id, partition)] = owner
    return snapshot


def _events(query: Query, base: int, first: int, ids: list[tuple]) -> Iterator[Event]:
    """The channel's stored events in offset order, a page at a time; appends (key,
    publisher id, id, accepted at) of each from key ``first`` on to ``ids``."""
    low, high = base, base | OFFSET_MASK
    while True:
        rows = query(
            f"SELECT key, {EVENT_COLUMNS}, accepted_at FROM events WHERE key BETWEEN ? AND ? "
            f"ORDER BY key LIMIT {PAGE_ROWS}",
            (low, high),
        )
        for key, i, pub, part, ts, p, at in rows:
            ev = loaded(i, pub, part, ts, p, key & OFFSET_MASK)
            if key >= first:
                ids.append((key, ev.publisher_id, ev.id, at))
            yield ev
        if len(rows) < PAGE_ROWS:
            return
        low = rows[-1][0] + 1


def window(
    query: Query, base: int, first: int, event_ids: list[tuple]
) -> list[tuple[str, str, float]]:
    """The delivered window, oldest first: (publisher id, id, accepted at) of the
    delivered rows and of the events just read (``event_ids``: key, publisher id, id,
    accepted at), from key ``first`` (window_start) on. The events rows are reused:
    reading a long backlog again cost 0.7 s per million."""
    rows = query(
        "SELECT key, publisher_id, id, accepted_at FROM delivered WHERE key BETWEEN ? AND ?",
        (first, base | OFFSET_MASK),
    )
    rows += run_rows(base, first, query(RUNS_FROM, (base, base | OFFSET_MASK, first)))
    copied = len(rows)
    rows += event_ids
    rows.sort()  # two sorted runs: one merge
    if copied:  # a replayed dead letter (or schema 3) has a row in both tables: once
        return list({key: (pub, i, at) for key, pub, i, at in rows}.values())
    return [(pub, event_id, accepted_at) for _, pub, event_id, accepted_at in rows]


def next_offset(query: Query, base: int) -> int:
    """The stored next offset, or past the last event or delivered id if larger (an
    append stores it only when it is not the last event's + 1)."""
    key_range = (base, base | OFFSET_MASK)
    ((found,),) = query(
        "SELECT MAX((SELECT next_offset FROM channels WHERE id = ?), "
        "IFNULL((SELECT MAX(key) - ? + 1 FROM events WHERE key BETWEEN ? AND ?), 0), "
        "IFNULL((SELECT MAX(key) - ? + 1 FROM delivered WHERE key BETWEEN ? AND ?), 0), "
        "IFNULL((SELECT MAX(last) - ? + 1 FROM delivered_runs WHERE key BETWEEN ? AND ?), 0))",
        (base >> OFFSET_BITS, base, *key_range, base, *key_range, base, *key_range),
    )
    return found


def read_payloads(query: Query, base: int, offsets: Sequence[int]) -> dict[int, Any]:
    """offset -> payload of the channel's stored events among ``offsets``: one lookup per
    key (about 2 µs a row on this machine kind; a scan of the key range between costs as
    much per row it passes, so it loses as soon as other partitions interleave)."""
    rows = query(
        "SELECT key, payload FROM events WHERE key IN (SELECT value FROM json_each(?))",
        (json_list(base | offset for offset in offsets),),
    )
    return {key & OFFSET_MASK: unpack(stored) for key, stored in rows}
