"""Leases and write fencing of the PostgreSQL store (channel_server.store.leases).

Two PostgresStore instances with different broker ids stand for two brokers on one
database. Expiry is by the database's clock: a short lease and wait_until, no sleeps.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator

import psycopg
import pytest

from channel_server.errors import BrokerUnavailable, LeaseLost, StoreError
from channel_server.events import Event
from channel_server.store.base import ChannelRecord, MemberRecord
from channel_server.store.leases import Lease, LeaseStore
from channel_server.store.pg_schema import FENCE
from channel_server.store.postgres import PostgresConfig, PostgresStore
from tests.integration.procs import wait_until

LONG_S = 60.0
"""A lease that outlives the test."""
SHORT_S = 0.3
"""A lease meant to expire during the test."""
WAIT_S = 10.0


def ev(offset: int) -> Event:
    return Event(f"id-{offset}", "pub", 0, float(offset), "p", offset)


@pytest.fixture
def stores(pg_dsn: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Broker A, which created channel "c" (so holds its lease, epoch 1), and broker B."""
    a, b = PostgresStore(pg_dsn, "A"), PostgresStore(pg_dsn, "B")
    a.save_channel(ChannelRecord("c", "queue"))
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def rows(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]  # type: ignore[index]


def taken_over(a: PostgresStore, b: PostgresStore) -> int:
    """Let A's lease of "c" expire and B take it; returns B's epoch."""
    assert a.acquire("c", SHORT_S) is not None
    lease = wait_until(lambda: b.acquire("c", LONG_S), WAIT_S, "B takes the expired lease")
    return lease.epoch


def test_the_creator_holds_a_new_channel_and_renews_it_at_the_same_epoch(stores) -> None:
    a, b = stores
    assert isinstance(a, LeaseStore)
    (lease,) = a.leases()
    assert (lease.channel, lease.owner, lease.epoch) == ("c", "A", 1)
    again = a.acquire("c", LONG_S)
    assert again is not None and (again.owner, again.epoch) == ("A", 1)
    assert 0 < again.expires_in_s <= LONG_S
    assert a.renew("c", 1, LONG_S)
    assert b.acquire("c", LONG_S) is None  # live: not B's to take
    assert not b.renew("c", 1, LONG_S)


def test_an_expired_lease_goes_to_another_broker_with_the_next_epoch(stores, pg_dsn) -> None:
    a, b = stores
    a.append("c", [ev(0)], 1, 0.0)
    assert taken_over(a, b) == 2
    assert [(x.owner, x.epoch) for x in b.leases()] == [("B", 2)]
    # The old owner's writes are refused by the database, and write nothing.
    with pytest.raises(LeaseLost):
        a.append("c", [ev(1)], 2, 0.0)
    with pytest.raises(LeaseLost):
        a.save_member(MemberRecord("c", "g", "s1", "PYRO:x@127.0.0.1:1", 1))
    with pytest.raises(LeaseLost):  # it knows now: refused at once, not deferred
        a.ack("c", "g", [0])
    assert not a.renew("c", 1, LONG_S)
    assert (rows(pg_dsn, "events"), rows(pg_dsn, "members"), rows(pg_dsn, "acks")) == (1, 0, 0)
    b.append("c", [ev(1)], 2, 0.0)  # the new owner writes
    assert [e.offset for e in b.load("c").events] == [0, 1]


def test_deferred_writes_of_a_lost_channel_are_dropped(stores, pg_dsn) -> None:
    a, b = stores
    a.append("c", [ev(0), ev(1)], 2, 0.0)
    taken_over(a, b)
    a.ack("c", "g", [0])  # A does not know yet: deferred, then refused when written
    a.delete("c", [1])
    a.load("c")  # writes the deferred ones first
    assert (rows(pg_dsn, "acks"), rows(pg_dsn, "events"), rows(pg_dsn, "delivered")) == (0, 2, 0)
    with pytest.raises(LeaseLost):
        a.delete("c", [0])


def test_a_store_writes_no_channel_it_holds_no_lease_for(stores, pg_dsn) -> None:
    _, b = stores
    with pytest.raises(LeaseLost) as lost:
        b.append("c", [ev(0)], 1, 0.0)
    assert isinstance(lost.value, BrokerUnavailable)  # clients retry through the name server
    assert lost.value.channel == "c"
    with pytest.raises(LeaseLost):
        b.save_group("c", "g", 0)
    assert rows(pg_dsn, "events") == rows(pg_dsn, "groups") == 0


def test_release_frees_the_lease_and_a_handoff_reserves_it(stores, pg_dsn) -> None:
    a, b = stores
    a.release("c", 1)
    assert [(x.owner, x.epoch) for x in a.leases()] == [(None, 1)]
    with pytest.raises(LeaseLost):
        a.save_group("c", "g", 0)
    lease = b.acquire("c", LONG_S)
    assert lease is not None and (lease.owner, lease.epoch) == ("B", 2)
    b.release("c", 2, handoff_to="C")
    (moving,) = b.leases()
    assert (moving.owner, moving.handoff_to) == (None, "C")
    assert a.acquire("c", LONG_S) is None  # reserved for C
    c = PostgresStore(pg_dsn, "C")
    try:
        taken = c.acquire("c", LONG_S)
        assert taken is not None and (taken.owner, taken.epoch, taken.handoff_to) == ("C", 3, None)
    finally:
        c.close()


def test_a_take_over_waits_for_a_write_in_flight(stores, pg_dsn) -> None:
    a, b = stores
    with psycopg.connect(pg_dsn) as writer:  # connected first: the lease lasts SHORT_S
        assert a.acquire("c", SHORT_S) is not None
        assert writer.execute(FENCE, ("c", "A", 1)).fetchone()  # A's write, fence taken
        wait_until(lambda: a.leases()[0].expires_in_s < 0, WAIT_S, "A's lease to expire")
        result: list = []
        taker = threading.Thread(target=lambda: result.append(b.acquire("c", LONG_S)))
        taker.start()
        wait_until(lambda: waiting_on_a_lock(pg_dsn, "B"), WAIT_S, "B to wait for the write")
        assert taker.is_alive() and not result
        writer.commit()
    taker.join(WAIT_S)
    assert result[0] is not None and result[0].epoch == 2


def test_a_write_waits_for_a_take_over_in_flight_and_is_refused(stores, pg_dsn) -> None:
    a, _ = stores
    with psycopg.connect(pg_dsn) as taker:  # another broker's take-over, not committed yet
        taker.execute("UPDATE channel_leases SET owner = 'B', epoch = epoch + 1")
        outcome: list = []
        writer = threading.Thread(target=lambda: outcome.append(append_or_error(a)))
        writer.start()
        wait_until(lambda: waiting_on_a_lock(pg_dsn, "A"), WAIT_S, "A's write to wait")
        assert writer.is_alive() and not outcome
        taker.commit()
    writer.join(WAIT_S)
    assert isinstance(outcome[0], LeaseLost)
    assert rows(pg_dsn, "events") == 0


def append_or_error(store: PostgresStore) -> Exception | None:
    try:
        store.append("c", [ev(0)], 1, 0.0)
    except Exception as exc:  # handed to the test thread
        return exc
    return None


def waiting_on_a_lock(dsn: str, broker_id: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name IN (%s, %s) "
            "AND wait_event_type = 'Lock'",  # its channels' connection or its leases'
            (f"channel_server {broker_id}", f"channel_server {broker_id} leases"),
        ).fetchone()
    return bool(row and row[0])


def test_a_refused_connection_says_where_without_the_password(pg_dsn) -> None:
    wrong = pg_dsn.replace("channels:", "channels:not-the-password-", 1)
    with pytest.raises(StoreError) as refused:
        PostgresStore(wrong, "A")
    assert "not-the-password" not in str(refused.value)
    assert "127.0.0.1" in str(refused.value) and "password" in str(refused.value)


def test_a_database_of_another_schema_version_is_refused(pg_dsn) -> None:
    PostgresStore(pg_dsn, "A").close()
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(StoreError, match="schema 99"):
        PostgresStore(pg_dsn, "A")


def test_the_tables_are_private_to_the_role_that_made_them(stores, pg_dsn) -> None:
    other = f"other_{secrets.token_hex(4)}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {other}")
        try:
            tables = conn.execute(
                "SELECT c.relname, has_table_privilege(%s, c.oid, 'SELECT, INSERT, UPDATE, "
                "DELETE') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind = 'r'",
                (other,),
            ).fetchall()
        finally:
            conn.execute(f"DROP ROLE {other}")
    assert {name for name, _ in tables} >= {"events", "channel_leases", "members"}
    assert [name for name, granted in tables if granted] == []


def test_a_broken_connection_is_opened_again(stores, pg_dsn) -> None:
    a, _ = stores
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            ("channel_server A",),
        )
    with pytest.raises(StoreError):  # the write in flight fails, as a typed error
        a.append("c", [ev(0)], 1, 0.0)
    a.append("c", [ev(0)], 1, 0.0)  # the next one reconnects
    assert rows(pg_dsn, "events") == 1


def test_leases_do_not_wait_behind_a_long_statement_of_the_channels(stores, pg_dsn) -> None:
    """The leases have a connection of their own: while the channels' connection runs a
    long statement (a restore reading a big backlog), the lease rounds' calls (renewals
    and a look at the leases) still go through, so no term runs out behind it."""
    a, b = stores
    cancelled: list[BaseException] = []

    def long_statement() -> None:
        try:
            a._query("SELECT pg_sleep(60)")
        except StoreError as exc:  # cancelled below
            cancelled.append(exc)

    busy = threading.Thread(target=long_statement, daemon=True)
    busy.start()
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        sleeping = "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'"
        pid = wait_until(lambda: admin.execute(sleeping).fetchone(), WAIT_S, "the long one")
        try:
            assert a.renew("c", 1, LONG_S)
            assert [(lease.channel, lease.owner) for lease in b.leases()] == [("c", "A")]
            assert [(lease.channel, lease.owner) for lease in a.leases()] == [("c", "A")]
            assert busy.is_alive()  # all of that while the long statement ran
        finally:
            admin.execute("SELECT pg_cancel_backend(%s)", pid)
    busy.join(WAIT_S)
    assert cancelled and not busy.is_alive()


def test_a_broker_frozen_inside_a_write_does_not_hold_a_take_over_back(pg_dsn) -> None:
    """A frozen between two statements of a write transaction, its lease row held FOR
    SHARE: the server closes its idle session after half a term, so B takes the expired
    lease instead of waiting for A to wake; A's write then fails and A holds nothing."""
    a = PostgresStore(pg_dsn, "A", PostgresConfig(lease_s=1.0))
    b = PostgresStore(pg_dsn, "B")
    try:
        a.save_channel(ChannelRecord("c", "queue"))
        assert a.acquire("c", SHORT_S) is not None
        taken: list = []
        # A's write, fenced: its lease row held FOR SHARE
        with pytest.raises(StoreError), a._tx("c") as (cur, _):
            taken.append(wait_until(lambda: acquired(b, "c"), WAIT_S, "B takes over"))
            cur.execute("SELECT 1")  # A wakes: its session was closed meanwhile
        assert [(lease.owner, lease.epoch) for lease in taken] == [("B", 2)]
        with pytest.raises(LeaseLost):
            a.append("c", [ev(0)], 1, 0.0)
        assert rows(pg_dsn, "events") == 0
    finally:
        a.close()
        b.close()


def acquired(store: PostgresStore, channel: str) -> Lease | None:
    """The lease, or None when not taken (another holds it, or the statement timed out)."""
    try:
        return store.acquire(channel, LONG_S)
    except StoreError:
        return None
