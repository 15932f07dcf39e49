"""SQLiteStore: failed transactions, schema upgrades and deferred writes."""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channel_server.errors import StoreError
from channel_server.events import Event
from channel_server.store.base import ChannelRecord
from channel_server.store.rows import runs as _runs
from channel_server.store.sqlite import SQLiteStore
from channel_server.store.sqlite_schema import SCHEMA_VERSION
from tests.integration.procs import wait_until


def ev(offset: int, payload: object) -> Event:
    return Event(f"e{offset}", "pub", 0, float(offset), payload, offset)


def test_a_failed_append_leaves_the_store_usable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "data")
    try:
        store.save_channel(ChannelRecord("c", "queue"))
        # The payload cannot be packed (an int beyond 64 bits): the append fails inside
        # its transaction, with an error that is not an sqlite3.Error.
        with pytest.raises((OverflowError, StoreError)):
            store.append("c", [ev(0, "fine"), ev(1, 2**64)], next_offset=2, accepted_at=0.0)
        assert store.load("c").events == []
        store.append("c", [ev(2, "next")], next_offset=3, accepted_at=1.0)
        assert [e.id for e in store.load("c").events] == ["e2"]
    finally:
        store.close()


OLD_CHANNELS = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE channels(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, kind TEXT,
    next_offset INTEGER NOT NULL DEFAULT 0);
"""
"""The tables versions 2 and 3 began with."""

V2_EVENTS = (
    OLD_CHANNELS
    + """
CREATE TABLE events(
    key INTEGER PRIMARY KEY, id TEXT NOT NULL, publisher_id TEXT NOT NULL, partition,
    timestamp REAL NOT NULL, payload);
INSERT INTO meta VALUES ('schema', '2');
INSERT INTO channels VALUES (1, 'c', 'queue', 1);
INSERT INTO events VALUES (1099511627776, 'old', 'pub', 0, 1.0, 'kept');
"""
)


def _written_by_an_older_broker(tmp_path: Path, script: str) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "channels.sqlite") as db:
        db.executescript(script)
    return data


def test_a_schema_2_database_is_upgraded_in_place(tmp_path: Path) -> None:
    data = _written_by_an_older_broker(tmp_path, V2_EVENTS)
    store = SQLiteStore(data)
    try:
        store.append("c", [ev(1, "new")], next_offset=2, accepted_at=5.0)
        snap = store.load("c")
        assert [(e.id, e.payload) for e in snap.events] == [("old", "kept"), ("e1", "new")]
        # a queued event's id is in the window (version 2 did not keep when it came)
        assert snap.delivered == [("pub", "old", 0.0), ("pub", "e1", 5.0)]
        assert snap.next_offset == 2
    finally:
        store.close()
    with sqlite3.connect(data / "channels.sqlite") as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (
            SCHEMA_VERSION,
        )


V3_EVENTS = (
    OLD_CHANNELS
    + """
CREATE TABLE events(
    key INTEGER PRIMARY KEY, id TEXT NOT NULL, publisher_id TEXT NOT NULL, partition,
    timestamp REAL NOT NULL, payload, accepted_at REAL NOT NULL);
CREATE TABLE delivered(key INTEGER PRIMARY KEY, id TEXT NOT NULL, accepted_at REAL NOT NULL);
CREATE TRIGGER events_delivered AFTER INSERT ON events BEGIN
    INSERT OR IGNORE INTO delivered VALUES (new.key, new.id, new.accepted_at);
END;
INSERT INTO meta VALUES ('schema', '3');
INSERT INTO channels VALUES (1, 'c', 'queue', 0);
INSERT INTO events VALUES (1099511627776, 'a', 'pub', 0, 1.0, 'x', 7.0);
INSERT INTO events VALUES (1099511627777, 'b', 'pub', 0, 2.0, 'y', 8.0);
DELETE FROM events WHERE key = 1099511627776;
"""
)


def test_a_schema_3_database_keeps_its_window_without_the_trigger(tmp_path: Path) -> None:
    """Version 3 copied every id at publish time: its delivered rows of queued events
    count once in the window, and new events no longer go to delivered."""
    data = _written_by_an_older_broker(tmp_path, V3_EVENTS)
    store = SQLiteStore(data)
    try:
        store.append("c", [ev(2, "new")], next_offset=3, accepted_at=9.0)
        # "a" was deleted when no row kept its publisher id; "b" has its event row's
        assert store.load("c").delivered == [("", "a", 7.0), ("pub", "b", 8.0), ("pub", "e2", 9.0)]
        store.trim_delivered("c", 2)
        assert store.load("c").delivered == [("pub", "e2", 9.0)]
    finally:
        store.close()
    with sqlite3.connect(data / "channels.sqlite") as db:
        triggers = db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        assert triggers.fetchall() == []
        assert db.execute("SELECT key & 255 FROM delivered").fetchall() == []


V4_MEMBERS = (
    OLD_CHANNELS
    + """
ALTER TABLE channels ADD COLUMN window_start INTEGER NOT NULL DEFAULT 0;
CREATE TABLE members(
    channel TEXT NOT NULL, grp TEXT NOT NULL, member_id TEXT NOT NULL,
    callback TEXT NOT NULL, prefetch INTEGER NOT NULL,
    PRIMARY KEY(channel, grp, member_id)) WITHOUT ROWID;
INSERT INTO meta VALUES ('schema', '4');
INSERT INTO channels VALUES (1, 'c', 'queue', 0, 0);
INSERT INTO members VALUES ('c', 'default', 's1', 'PYRO:subscriber.s1@127.0.0.1:1', 10);
"""
)


def test_a_schema_4_member_is_the_owners_and_has_no_callback_secret(tmp_path: Path) -> None:
    data = _written_by_an_older_broker(tmp_path, V4_MEMBERS)
    store = SQLiteStore(data)
    try:
        (member,) = store.load("c").members
        assert (member.member_id, member.prefetch, member.user, member.secret) == (
            "s1",
            10,
            "owner",
            "",
        )
        store.save_member(replace(member, user="alice", secret="s" * 20))
        (again,) = store.load("c").members
        assert (again.user, again.secret) == ("alice", "s" * 20)
    finally:
        store.close()


V5_WINDOW = (
    OLD_CHANNELS
    + """
ALTER TABLE channels ADD COLUMN window_start INTEGER NOT NULL DEFAULT 0;
CREATE TABLE events(
    key INTEGER PRIMARY KEY, id TEXT NOT NULL, publisher_id TEXT NOT NULL, partition,
    timestamp REAL NOT NULL, payload, accepted_at REAL NOT NULL);
CREATE TABLE delivered(key INTEGER PRIMARY KEY, id TEXT NOT NULL, accepted_at REAL NOT NULL);
INSERT INTO meta VALUES ('schema', '5');
INSERT INTO channels VALUES (1, 'c', 'queue', 0, 0);
INSERT INTO delivered VALUES (1099511627776, 'a', 7.0);
INSERT INTO events VALUES (1099511627777, 'b', 'pub', 0, 2.0, 'y', 8.0);
"""
)
"""A channel of schema 5 (before id scopes): "a" acknowledged, "b" still stored."""


def test_a_schema_5_channel_keeps_ids_unique_per_channel(tmp_path: Path) -> None:
    data = _written_by_an_older_broker(tmp_path, V5_WINDOW)
    store = SQLiteStore(data)
    try:
        assert store.channels() == [ChannelRecord("c", "queue", "channel")]
        store.save_channel(ChannelRecord("c", "queue", "publisher"))  # the first record stays
        store.save_channel(ChannelRecord("new", "queue"))  # a new channel: per publisher
        assert store.channels() == [
            ChannelRecord("c", "queue", "channel"),
            ChannelRecord("new", "queue", "publisher"),
        ]
        store.delete("c", [1])
        store.append("c", [ev(2, "z")], next_offset=3, accepted_at=9.0)
        assert store.load("c").delivered == [("", "a", 7.0), ("pub", "b", 8.0), ("pub", "e2", 9.0)]
    finally:
        store.close()
    with sqlite3.connect(data / "channels.sqlite") as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (
            SCHEMA_VERSION,
        )
    store = SQLiteStore(data)  # opened again: the same
    try:
        assert store.channels()[0] == ChannelRecord("c", "queue", "channel")
        assert [i for _, i, _ in store.load("c").delivered] == ["a", "b", "e2"]
    finally:
        store.close()


def test_a_newer_schema_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    SQLiteStore(data).close()
    with sqlite3.connect(data / "channels.sqlite") as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(StoreError, match="schema 99"):
        SQLiteStore(data)


def test_deferred_writes_reach_the_file_in_the_background(tmp_path: Path) -> None:
    """Without any reader asking, the maintenance thread writes deferred deletes, so a
    crash (no close) loses at most the last moment of them."""
    store = SQLiteStore(tmp_path / "data")
    try:
        store.append("c", [ev(0, "a"), ev(1, "b")], next_offset=2, accepted_at=0.0)
        store.delete("c", [0])
        with sqlite3.connect(store.path) as peek:
            wait_until(
                lambda: peek.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1,
                timeout_s=5.0,
                what="the deferred delete in the file",
            )
    finally:
        store.close()


CRASH_AFTER_APPEND = """
import os, sys
from channel_server.events import Event
from channel_server.store.rows import runs as _runs
from channel_server.store.sqlite import SQLiteStore
from tests.integration.procs import wait_until
store = SQLiteStore(sys.argv[1])
store.append("c", [Event("a", "pub", 0, 1.0, "x", 0)], 1, 7.0)
store.delete("c", [0])  # deferred: the crash comes first
store.append("c", [Event("b", "pub", 0, 2.0, "y", 1)], 2, 8.0)
os._exit(0)  # a crash: no close, no background write
"""


def test_a_crash_before_the_background_write_keeps_every_id_and_event(tmp_path: Path) -> None:
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-c", CRASH_AFTER_APPEND, str(data)], check=True)
    store = SQLiteStore(data)
    try:
        snap = store.load("c")
        assert snap.delivered == [("pub", "a", 7.0), ("pub", "b", 8.0)]
        # "a" comes back (to be redelivered) unless its delete was written before the crash
        assert [e.id for e in snap.events] in (["a", "b"], ["b"])
        assert snap.next_offset == 2
    finally:
        store.close()


@given(st.sets(st.integers(min_value=0, max_value=200)))
def test_runs_cover_exactly_the_offsets_in_order(offsets: set[int]) -> None:
    runs = _runs(list(offsets) + list(offsets)[:3])  # a repeated offset changes nothing
    covered = [o for first, last in runs for o in range(first, last + 1)]
    assert covered == sorted(offsets)
    assert all(b[0] > a[1] + 1 for a, b in itertools.pairwise(runs))  # maximal runs
