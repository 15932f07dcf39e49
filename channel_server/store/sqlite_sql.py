"""How the SQLite store lays its rows out and writes them: keys, multi-row INSERTs, the
delivered window's trim.

The delivered-ID window is the (publisher id, id) of the ``events`` rows and of the
``delivered`` rows from the channel's ``window_start`` on, in offset order: a delete copies
them from the events it removes into ``delivered`` (by offset ranges, off the publish
path), and a trim moves ``window_start`` forward. Delivered rows of schema 5 and before
have an empty publisher id: their channels keep ids unique per channel (``id_scope``).
"""

from __future__ import annotations

import functools
import itertools
import json
import sqlite3
from array import array
from collections.abc import Iterable, Sequence

import msgpack

from channel_server.events import (
    EVENT_ACCEPTED_AT,
    EVENT_ID,
    EVENT_OFFSET,
    EVENT_PUBLISHER,
    Event,
)
from channel_server.store.rows import pack, runs

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
DELIVERED_ROW_WIDTH = 4
"""key, id, accepted_at, publisher_id"""
RUN_FIELDS = (EVENT_ID, EVENT_PUBLISHER, EVENT_ACCEPTED_AT)
"""What a ``delivered_runs`` row packs beside its offsets: ids, publisher ids, accept
times."""
OWNER_ROW_WIDTH = 5
"""channel, grp, publisher_id, partition, owner"""
CACHED_STATEMENTS = 5 * ROWS_PER_STATEMENT
"""Room for the multi-row INSERTs of every batch size (events with two verbs, acks,
owners, dead letters) besides the rest."""


def trim(db: sqlite3.Connection, base: int, count: int) -> None:
    """Forget the ``count`` oldest ids of the window: move window_start past them (to the
    next id's offset, or past the last one), save the next offset that may carry, and
    delete the delivered rows below it (and the ``delivered_runs`` wholly below it)."""
    start = window_start(db, base)
    key_range = (base | start, base | OFFSET_MASK)
    rows = db.execute(f"{WINDOW_KEYS} ORDER BY key LIMIT ?3", (*key_range, count + 1))
    keys = _oldest_keys(db, base, key_range[0], [key for (key,) in rows], count + 1)
    if len(keys) > count:
        new_start = keys[count] - base
    elif keys:  # every id goes: the window starts after the last one
        new_start = keys[-1] - base + 1
    else:
        new_start = start
    if new_start <= start:
        return
    db.execute(
        "UPDATE channels SET window_start = ?1, next_offset = MAX(next_offset, ?1) WHERE id = ?2",
        (new_start, base >> OFFSET_BITS),
    )
    db.execute("DELETE FROM delivered WHERE key BETWEEN ? AND ?", (base, base | new_start - 1))
    db.execute(
        "DELETE FROM delivered_runs WHERE key BETWEEN ? AND ? AND last < ?",
        (base, base | OFFSET_MASK, base | new_start),
    )


def _oldest_keys(
    db: sqlite3.Connection, base: int, low: int, keys: list[int], wanted: int
) -> list[int]:
    """The ``wanted`` smallest keys from ``low`` on among ``keys`` (the oldest of the
    delivered and events rows, in order) and the ``delivered_runs`` ids, in order: runs
    are read in key order, their offsets only, until the next starts past what is wanted.
    A trim forgets a second's worth of ids: lists are extended and sorted in C (mostly
    sorted already), not merged key by key."""
    runs = db.execute(
        "SELECT key, offsets FROM delivered_runs WHERE key BETWEEN ? AND ? AND last >= ? "
        "ORDER BY key",
        (base, base | OFFSET_MASK, low),
    )
    start = low - base
    gathered = list(keys)
    for first, packed in runs:
        if len(gathered) >= wanted:
            gathered.sort()
            if first > gathered[wanted - 1]:
                break
        gathered += [base | offset for offset in run_offsets(packed) if offset >= start]
    return sorted(set(gathered))[:wanted]  # a replayed dead letter is a row and in a run


def keep_next_offset(db: sqlite3.Connection, base: int, next_offset: int) -> None:
    """Store the channel's next offset when it is past the one stored (a publish whose
    last events were refused or duplicates leaves no key to read it from)."""
    db.execute(
        "UPDATE channels SET next_offset = MAX(next_offset, ?) WHERE id = ?",
        (next_offset, base >> OFFSET_BITS),
    )


def window_start(db: sqlite3.Connection, base: int) -> int:
    """The offset of the oldest id the channel's delivered window still holds."""
    cid = base >> OFFSET_BITS
    return db.execute("SELECT window_start FROM channels WHERE id = ?", (cid,)).fetchone()[0]


def insert(db: sqlite3.Connection, verb: str, table: str, width: int, params: list) -> None:
    """``verb INTO table`` of rows given as one flat list of ``width`` values each,
    ROWS_PER_STATEMENT rows per statement."""
    step = width * ROWS_PER_STATEMENT
    for start in range(0, len(params), step):
        chunk = params if len(params) <= step else params[start : start + step]
        db.execute(insert_sql(verb, table, width, len(chunk) // width), chunk)


def flat(rows: Iterable[tuple]) -> list:
    return list(itertools.chain.from_iterable(rows))


def event_params(base: int, events: Iterable[Event], accepted_at: float | None = None) -> list:
    """The flat INSERT parameters of events rows (accepted at ``accepted_at``, or each at
    its own), in one loop: a tuple per row then a flattening cost as much again
    (measured)."""
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
            ev.accepted_at if accepted_at is None else accepted_at,
        )
    return params


@functools.lru_cache(maxsize=CACHED_STATEMENTS)
def insert_sql(verb: str, table: str, width: int, rows: int) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return f"{verb} INTO {table} VALUES " + ", ".join([row] * rows)


def json_list(values: Iterable[int]) -> str:
    """Integers as one JSON array parameter: a whole set in one statement (json_each)."""
    return json.dumps(list(values))


SCATTERED_RUNS = 4
"""Offsets to delete are scattered when they form more than one run per this many."""
KEEP_IDS = (
    "INSERT OR IGNORE INTO delivered(key, id, accepted_at, publisher_id) "
    "SELECT key, id, accepted_at, publisher_id FROM events WHERE"
)


def delete_events(
    db: sqlite3.Connection, channel: str, base: int, offsets: Sequence[int], acked: bool
) -> int:
    """Delete the events, keeping their ids in the window (copied into ``delivered``), and
    their acks when the channel has any; returns how many were.

    Offsets that form a few runs go as range statements; scattered ones (acks of many
    partitions, each holding a few events) as one statement over a JSON list, which SQLite
    walks in C instead of a statement per run (2.0 against 2.4-3.5 µs per event)."""
    found = runs(offsets)
    if len(found) * SCATTERED_RUNS > len(offsets):
        keys = (json_list(base | offset for offset in offsets),)
        db.execute(f"{KEEP_IDS} key IN (SELECT value FROM json_each(?))", keys)
        removed = db.execute(
            "DELETE FROM events WHERE key IN (SELECT value FROM json_each(?))", keys
        ).rowcount
    else:
        ranges = [(base | first, base | last) for first, last in found]
        db.executemany(f"{KEEP_IDS} key BETWEEN ? AND ?", ranges)
        removed = db.executemany("DELETE FROM events WHERE key BETWEEN ? AND ?", ranges).rowcount
    if acked:  # acks exist only for channels with several groups
        forget_acks(db, channel, offsets)
    return removed


def forget_acks(db: sqlite3.Connection, channel: str, offsets: Iterable[int]) -> None:
    """Drop the acks of events every group acknowledged."""
    db.execute(
        "DELETE FROM acks WHERE channel = ? AND offset IN (SELECT value FROM json_each(?))",
        (channel, json_list(offsets)),
    )


def keep_journaled_ids(db: sqlite3.Connection, base: int, events: Sequence[Event]) -> None:
    """The window keeps the ids of journaled events acknowledged before they became rows:
    one ``delivered_runs`` row for them all, its offsets as 64-bit integers (in ack order:
    readers sort) and their ids, publisher ids and accept times as three packed lists (a
    row per id cost a third of the broker's time, binding parameters)."""
    offsets = array("q", map(EVENT_OFFSET, events))
    columns = [list(map(field, events)) for field in RUN_FIELDS]
    stored = db.execute(
        "INSERT OR IGNORE INTO delivered_runs VALUES (?, ?, ?, ?)",
        (base | min(offsets), base | max(offsets), offsets.tobytes(), msgpack.packb(columns)),
    ).rowcount
    if not stored:  # a run starting there already (never, by design): a row per id then
        params: list = []
        for ev in events:
            params += (base | ev.offset, ev.id, ev.accepted_at, ev.publisher_id)
        insert(db, "INSERT OR IGNORE", "delivered", DELIVERED_ROW_WIDTH, params)


RUNS_FROM = "SELECT offsets, ids FROM delivered_runs WHERE key BETWEEN ? AND ? AND last >= ?"
"""The ``delivered_runs`` rows of a channel (key base, highest first key) holding keys
from a low key on: for :func:`run_rows`."""


def run_keys(db: sqlite3.Connection, base: int, low: int, high: int) -> set[int]:
    """The keys of the channel's ``delivered_runs`` ids in runs reaching ``low`` and
    starting by ``high`` (their offsets only: the ids stay packed)."""
    runs = db.execute(
        "SELECT offsets FROM delivered_runs WHERE key BETWEEN ? AND ? AND last >= ?",
        (base, high, low),
    )
    return {base | offset for (packed,) in runs for offset in run_offsets(packed)}


def run_rows(base: int, low: int, runs: Iterable[tuple[bytes, bytes]]) -> list[tuple]:
    """The ids of ``delivered_runs`` rows (offsets, ids) from key ``low`` on, in key
    order."""
    found = []
    for packed_offsets, blob in runs:
        ids, publishers, accepted = msgpack.unpackb(blob, raw=False)
        found += [
            (base | offset, pub, i, at)
            for offset, i, pub, at in zip(
                run_offsets(packed_offsets), ids, publishers, accepted, strict=True
            )
            if base | offset >= low
        ]
    found.sort()
    return found


def run_offsets(packed: bytes) -> array:
    """A ``delivered_runs`` row's offsets (in the order they were acknowledged)."""
    offsets = array("q")
    offsets.frombytes(packed)
    return offsets


def move_journaled(db: sqlite3.Connection, base: int, events: Iterable[Event]) -> None:
    """Journaled events that waited long enough become rows."""
    insert(db, "INSERT OR IGNORE", "events", EVENT_ROW_WIDTH, event_params(base, events))


def restore_record(db: sqlite3.Connection, record: tuple[int, int, list[Event]]) -> None:
    """A journal record a past life left (a crash): its events become rows, but those
    the delivered window has (acknowledged before the crash); the channel's next offset
    is kept."""
    base, next_offset, events = record
    if events:
        keys = [base | ev.offset for ev in events]
        known = db.execute(
            "SELECT key FROM delivered WHERE key BETWEEN ? AND ?", (min(keys), max(keys))
        ).fetchall()
        done = {key for (key,) in known} | run_keys(db, base, min(keys), max(keys))
        move_journaled(db, base, (ev for ev in events if base | ev.offset not in done))
    keep_next_offset(db, base, next_offset)
