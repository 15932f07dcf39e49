"""The SQLite store's tables and their upgrades from the schemas older brokers wrote."""

from __future__ import annotations

import logging
import sqlite3

log = logging.getLogger("channel_server.store.sqlite")
SCHEMA_VERSION = "7"
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
CREATE TABLE IF NOT EXISTS journal_done(segment INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS delivered_runs(
    key INTEGER PRIMARY KEY, last INTEGER NOT NULL, offsets BLOB NOT NULL, ids BLOB NOT NULL);
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
    "6": (  # version 7: the publish journal (an older broker would not replay it)
        "CREATE TABLE IF NOT EXISTS journal_done(segment INTEGER PRIMARY KEY)",
        "CREATE TABLE IF NOT EXISTS delivered_runs(key INTEGER PRIMARY KEY, "
        "last INTEGER NOT NULL, offsets BLOB NOT NULL, ids BLOB NOT NULL)",
    ),
}
"""schema version -> the statements that bring it to the next one (one transaction); a
(table, column, type) adds that column unless the table has it (made new by SCHEMA)"""


def migrate(db: sqlite3.Connection) -> None:
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
