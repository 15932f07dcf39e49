"""``serve --store postgresql://...`` (or CHANNELS_STORE_DSN): which store a broker opens,
and that its password is never shown."""

from __future__ import annotations

import logging
import sys

import pytest

from channel_client import cli_common as cc
from channel_server import cli
from channel_server.errors import StoreError
from channel_server.store.dsn import STORE_DSN_ENV, store_dsn, without_password
from channel_server.store.postgres import PostgresStore

DSN = "postgresql://channels:s3cret-pw@127.0.0.1:1/db"


def serve_args(*flags: str):
    return cli.build_parser().parse_args(["serve", *flags])


def test_the_flag_or_else_the_environment_chooses_postgresql(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(STORE_DSN_ENV, raising=False)
    assert store_dsn(serve_args()) is None  # SQLite in the data dir
    assert store_dsn(serve_args("--store", DSN)) == DSN
    monkeypatch.setenv(STORE_DSN_ENV, DSN)
    assert store_dsn(serve_args()) == DSN
    assert store_dsn(serve_args("--data-dir", "d")) is None  # an explicit choice wins
    assert store_dsn(serve_args("--memory")) is None


def test_a_password_on_the_command_line_is_warned_about_without_repeating_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(STORE_DSN_ENV, raising=False)
    with caplog.at_level(logging.WARNING, logger="channel_server.store"):
        store_dsn(serve_args("--store", "postgresql://channels@127.0.0.1:1/db"))
        assert caplog.text == ""  # no password in it: nothing to say
        store_dsn(serve_args("--store", DSN))
    assert "--store carries a password" in caplog.text
    assert "s3cret-pw" not in caplog.text


def test_a_store_that_is_no_postgresql_uri_is_refused_without_repeating_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        serve_args("--store", "mysql://u:hidden-pw@h/db")
    assert "hidden-pw" not in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one store only
        serve_args("--store", DSN, "--memory")


def test_print_config_leaves_the_password_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--store", DSN, "--print-config"]) == cc.EXIT_OK
    printed = capsys.readouterr().out
    assert 'store = "postgresql://channels@127.0.0.1:1/db"' in printed
    assert "s3cret-pw" not in printed
    assert without_password(serve_args("--store", "postgresql://h/db")).store == (
        "postgresql://h/db"
    )


def test_a_database_that_cannot_be_reached_is_one_line_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["serve", "--store", DSN, "--broker-id", "b1"])
    assert code == cc.EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert "postgresql://channels@127.0.0.1:1/db" in err
    assert "s3cret-pw" not in err


def test_without_psycopg_the_store_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg fails
    with pytest.raises(StoreError, match=r"install the postgres extra") as missing:
        PostgresStore(DSN, "b1")
    assert "s3cret-pw" not in str(missing.value)


def test_a_dsn_that_does_not_parse_is_refused_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(STORE_DSN_ENV, "host=127.0.0.1 s3cret-pw")
    assert cli.main(["serve", "--broker-id", "b1"]) == cc.EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert "not a valid PostgreSQL DSN" in err
    assert "s3cret-pw" not in err
