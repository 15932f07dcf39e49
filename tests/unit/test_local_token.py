"""The local token is taken only from where this OS user alone can have put it: a token
another user planted (in a state dir on a shared path such as /tmp) would make that user an
owner of the broker that adopted it."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from channel_server.credentials import TOKEN_FILE, ambient, ensure_token, read_token
from channel_server.errors import StoreError


def plant(directory: Path, token: str, mode: int, dir_mode: int = 0o700) -> None:
    directory.mkdir(exist_ok=True)
    (directory / TOKEN_FILE).write_text(token + "\n", encoding="ascii")
    os.chmod(directory / TOKEN_FILE, mode)
    os.chmod(directory, dir_mode)


def as_another_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process stands for a user other than the one that owns the test's files."""
    other = os.geteuid() + 1
    monkeypatch.setattr(os, "geteuid", lambda: other)


def test_a_broker_makes_one_private_token_and_reads_it_back(tmp_path: Path) -> None:
    state, data = tmp_path / "state", tmp_path / "data"
    token = ensure_token(state, data)
    assert read_token(state) == read_token(data) == token
    for directory in (state, data):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(directory / TOKEN_FILE).st_mode) == 0o600
    assert ensure_token(state, data) == token  # kept across starts


def test_a_token_others_may_write_is_not_adopted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    plant(state, "planted", 0o666)
    with caplog.at_level(logging.WARNING, logger="channel_server.credentials"):
        token = ensure_token(state)
    assert token != "planted"
    assert read_token(state) == token  # replaced, 0600
    assert stat.S_IMODE(os.stat(state / TOKEN_FILE).st_mode) == 0o600
    assert "other users may write to it" in caplog.text


def test_a_client_ignores_a_token_in_a_directory_others_may_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    plant(shared, "planted", 0o600, dir_mode=0o777)
    with caplog.at_level(logging.WARNING, logger="channel_server.credentials"):
        assert ambient(shared) is None
    assert "other users may write to its directory" in caplog.text


def test_a_token_another_user_owns_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    plant(state, "theirs", 0o600)
    as_another_user(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="channel_server.credentials"):
        assert read_token(state) is None
    assert "belongs to uid" in caplog.text


def test_a_broker_refuses_a_state_dir_another_user_owns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    plant(state, "theirs", 0o644)
    as_another_user(monkeypatch)
    with pytest.raises(StoreError, match="state dir belongs to uid"):
        ensure_token(state, tmp_path / "data")
    assert not (tmp_path / "data").exists()  # refused before anything was written


def test_a_token_file_that_is_a_symbolic_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    plant(elsewhere, "linked", 0o600)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / TOKEN_FILE).symlink_to(elsewhere / TOKEN_FILE)
    assert read_token(state) is None
