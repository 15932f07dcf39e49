"""The throwaway PostgreSQL server the store and failover tests use answers, and each test
gets a database of its own."""

from __future__ import annotations

import psycopg

from tests.pgcluster import PgCluster


def test_each_test_gets_an_empty_database_it_can_write(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")
        assert conn.execute("SELECT sum(x) FROM t").fetchone() == (1,)
    assert tables == (0,)


def test_the_server_refuses_a_wrong_password(pg_cluster: PgCluster) -> None:
    wrong = pg_cluster.dsn().replace(pg_cluster.password, "not-the-password")
    try:
        psycopg.connect(wrong, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        assert "password" in str(exc)
    else:
        raise AssertionError("a wrong password was accepted")
