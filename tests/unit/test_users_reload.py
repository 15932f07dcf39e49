"""The users file read again when it changes (a fake clock): at most once per CHECK_S,
only when it changed, and a file that cannot be read leaves the users as they were."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from channel_server import users as um
from channel_server.users import Action, Grant, UsersFile
from channel_server.users_reload import CHECK_S, ReloadedUsers

GRANT = (Grant("orders", frozenset({Action.PUBLISH})),)


@pytest.fixture(autouse=True)
def cheap_hashes() -> Iterator[None]:
    um.set_test_parameters()
    yield
    um.set_test_parameters(False)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def saved(path: Path, *names: str) -> UsersFile:
    users = UsersFile()
    for name in names:
        users.add(name, f"{name}-password", GRANT)
    users.save(path)
    return users


def test_a_changed_file_is_read_again_once_its_check_is_due(tmp_path: Path) -> None:
    path, clock = tmp_path / "users.yaml", Clock()
    reloaded = ReloadedUsers(path, saved(path, "alice", "bob"), clock)
    saved(path, "alice")
    assert reloaded.current().names() == ["alice", "bob"]  # not due yet
    clock.now += CHECK_S
    assert reloaded.current().names() == ["alice"]
    assert reloaded.generation == 1
    clock.now += CHECK_S
    first = reloaded.current()
    clock.now += CHECK_S
    assert reloaded.current() is first and reloaded.generation == 1  # unchanged: not read


def test_a_file_that_cannot_be_read_leaves_the_users_as_they_were(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock = tmp_path / "users.yaml", Clock()
    reloaded = ReloadedUsers(path, saved(path, "alice"), clock)
    path.write_text("users: [halfway through an edit")
    os.chmod(path, 0o600)
    clock.now += CHECK_S
    with caplog.at_level(logging.ERROR):
        assert reloaded.current().names() == ["alice"]
    assert "users stay as they were" in caplog.text
    saved(path, "alice", "carol")
    clock.now += CHECK_S
    assert reloaded.current().names() == ["alice", "carol"]
