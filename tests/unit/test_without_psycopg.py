"""A broker installed without the postgres extra (README's demo: ``pip install .``) starts
on SQLite, and asking it for PostgreSQL says what to install."""

from __future__ import annotations

from tests.unit.without_modules import run_without


def test_serve_imports_what_it_needs_without_psycopg() -> None:
    result = run_without(
        ("psycopg",),
        """
        from channel_server.store.postgres import PostgresConfig, PostgresStore
        from channel_server.store.sqlite import SQLiteStore
        from channel_server.broker import Broker
        print("imported")
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "imported"


def test_a_postgresql_store_without_psycopg_says_what_to_install() -> None:
    result = run_without(
        ("psycopg",),
        """
        from channel_server.errors import StoreError
        from channel_server.store.postgres import PostgresStore
        try:
            PostgresStore("postgresql://nobody@127.0.0.1:1/x", "b1")
        except StoreError as exc:
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert "install the postgres extra" in result.stdout
