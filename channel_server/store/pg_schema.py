"""The PostgreSQL store's tables, how they are made, and the SQL of its leases.

Text columns never hold what an event carries: PostgreSQL's text cannot hold a NUL
character, which ids, partitions and payloads may contain, so those are bytea (ids and
string partitions as UTF-8, a partition with a one-byte type tag, payloads as
:func:`channel_server.store.rows.pack` gives them with a flag for text). Publisher ids,
group, member and channel names are checked names and stay text.

The tables get no grants: only the role that made them (the brokers') can read them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # an optional extra: a broker without it must still start (on SQLite)
    import psycopg

SCHEMA_VERSION = "1"
SCHEMA_LOCK = 0x43484E4C
"""pg_advisory_xact_lock key: two brokers opening a new database make the tables once."""

TABLES = {
    "meta": "key text PRIMARY KEY, value text NOT NULL",
    "channels": "id bigserial PRIMARY KEY, name text NOT NULL UNIQUE, kind text, "
    "id_scope text NOT NULL DEFAULT 'publisher', next_offset bigint NOT NULL DEFAULT 0, "
    "window_start bigint NOT NULL DEFAULT 0",
    "channel_leases": "channel text PRIMARY KEY, owner text, epoch bigint NOT NULL, "
    "expires_at timestamptz NOT NULL, handoff_to text",
    "groups": "channel bigint NOT NULL, name text NOT NULL, created_offset bigint NOT NULL, "
    "PRIMARY KEY (channel, name)",
    "events": "channel bigint NOT NULL, ofs bigint NOT NULL, id bytea NOT NULL, "
    "publisher_id text NOT NULL, part bytea NOT NULL, ts double precision NOT NULL, "
    "is_text boolean NOT NULL, payload bytea NOT NULL, accepted_at double precision NOT NULL, "
    "PRIMARY KEY (channel, ofs)",
    "delivered": "channel bigint NOT NULL, ofs bigint NOT NULL, id bytea NOT NULL, "
    "publisher_id text NOT NULL, accepted_at double precision NOT NULL, "
    "PRIMARY KEY (channel, ofs)",
    "acks": "channel bigint NOT NULL, grp text NOT NULL, ofs bigint NOT NULL, "
    "PRIMARY KEY (channel, grp, ofs)",
    "members": "channel bigint NOT NULL, grp text NOT NULL, member_id text NOT NULL, "
    "callback text NOT NULL, prefetch integer NOT NULL, owner_user text NOT NULL, "
    "secret text NOT NULL, PRIMARY KEY (channel, grp, member_id)",
    "owners": "channel bigint NOT NULL, grp text NOT NULL, publisher_id text NOT NULL, "
    "part bytea NOT NULL, owner text NOT NULL, PRIMARY KEY (channel, grp, publisher_id, part)",
    "dead_letters": "channel bigint NOT NULL, grp text NOT NULL, ofs bigint NOT NULL, "
    "id bytea NOT NULL, publisher_id text NOT NULL, part bytea NOT NULL, "
    "ts double precision NOT NULL, is_text boolean NOT NULL, payload bytea NOT NULL, "
    "error text NOT NULL, PRIMARY KEY (channel, grp, ofs)",
}

# -- leases (channel_server.store.leases): the database's clock only -----------------------
LEASE_COLUMNS = "channel, owner, epoch, EXTRACT(EPOCH FROM expires_at - now())::float8, handoff_to"
ACQUIRE = f"""
INSERT INTO channel_leases AS l (channel, owner, epoch, expires_at)
VALUES (%(channel)s, %(me)s, 1, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (channel) DO UPDATE SET
    owner = EXCLUDED.owner,
    epoch = CASE WHEN l.owner IS NOT DISTINCT FROM EXCLUDED.owner THEN l.epoch ELSE l.epoch + 1 END,
    expires_at = EXCLUDED.expires_at,
    handoff_to = NULL
WHERE l.owner IS NOT DISTINCT FROM EXCLUDED.owner
    OR l.handoff_to IS NOT DISTINCT FROM EXCLUDED.owner
    OR (l.owner IS NULL AND l.handoff_to IS NULL)
    OR l.expires_at <= now()
RETURNING {LEASE_COLUMNS.replace("channel,", "l.channel,", 1)}
"""
"""Take a lease that is free, expired, handed to us or ours (same epoch then)."""
CREATE_LEASE = (
    "INSERT INTO channel_leases (channel, owner, epoch, expires_at) "
    "VALUES (%s, %s, 1, now() + make_interval(secs => %s)) ON CONFLICT (channel) DO NOTHING"
)
RENEW = (
    "UPDATE channel_leases SET expires_at = now() + make_interval(secs => %s) "
    "WHERE channel = %s AND owner = %s AND epoch = %s"
)
"""Ours still when nobody took it since, even past its expiry: the epoch is unchanged, so
no other broker wrote in between."""
RELEASE = (
    "UPDATE channel_leases SET owner = NULL, handoff_to = %(to)s, expires_at = CASE "
    "WHEN %(to)s::text IS NULL THEN now() ELSE GREATEST(expires_at, now()) END "
    "WHERE channel = %(channel)s AND owner = %(me)s AND epoch = %(epoch)s"
)
"""A handed-off lease stays reserved for its new owner for what was left of its term."""
FENCE = (
    "SELECT 1 FROM channel_leases WHERE channel = %s AND owner = %s AND epoch = %s "
    "AND expires_at > now() FOR SHARE"
)
"""The first statement of every write transaction: FOR SHARE, so a take-over's UPDATE
waits for a write in flight, and a write waits for a take-over in flight and then fails."""
FENCE_CTE = (
    "WITH fence AS (SELECT 1 FROM channel_leases WHERE channel = %(channel)s "
    "AND owner = %(me)s AND epoch = %(epoch)s AND expires_at > now() FOR SHARE) "
)
"""FENCE for a statement that is its own transaction: it writes only ``FROM fence``."""
CLAIM_SESSIONS = (
    "INSERT INTO meta AS m VALUES (%(key)s, (%(at_least)s::bigint + %(n)s)::text) "
    "ON CONFLICT (key) DO UPDATE "
    "SET value = (GREATEST(m.value::bigint, %(at_least)s) + %(n)s)::text "
    "RETURNING m.value::bigint - %(n)s"
)
"""Store.claim_sessions in one statement: two brokers claiming at once both get new ones."""
STILL_OURS = "SELECT 1 FROM channel_leases WHERE channel = %s AND owner = %s AND epoch = %s"
LEASES = (
    "SELECT c.name, l.owner, COALESCE(l.epoch, 0), "
    "COALESCE(EXTRACT(EPOCH FROM l.expires_at - now())::float8, 0), l.handoff_to "
    "FROM channels c LEFT JOIN channel_leases l ON l.channel = c.name "
    "WHERE c.kind IS NOT NULL ORDER BY c.id"
)


def create_schema(conn: psycopg.Connection[Any]) -> str | None:
    """Make the tables unless they exist (one broker at a time) and record the schema
    version; returns the version found when it is not SCHEMA_VERSION."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        for table, columns in TABLES.items():
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
            conn.execute(f"REVOKE ALL ON {table} FROM PUBLIC")
        conn.execute(
            "INSERT INTO meta VALUES ('schema', %s) ON CONFLICT (key) DO NOTHING",
            (SCHEMA_VERSION,),
        )
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    version = row[0] if row else None
    return None if version == SCHEMA_VERSION else version


def encode_part(partition: Any) -> bytes:
    """A partition (a 64-bit int or a string) as bytes that keep its type."""
    if type(partition) is int:
        return b"i" + str(partition).encode()
    return b"s" + str(partition).encode("utf-8")


def decode_part(stored: bytes) -> Any:
    text = bytes(stored).decode("utf-8")
    return int(text[1:]) if text[0] == "i" else text[1:]
