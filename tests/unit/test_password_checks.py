"""Passwords are checked a bounded number at a time: argon2 takes 64 MiB and a core for
each check, and strangers can send a wrong password on every connection they open."""

from __future__ import annotations

import base64
import threading
import time

import pytest

from channel_server import access as access_module
from channel_server.access import PASSWORD_CHECKS_AT_ONCE, Access
from channel_server.errors import LimitReached, NotAuthorized
from channel_server.monitor.http_auth import authenticate as http_authenticate
from channel_server.users import User, UsersFile

DEADLINE_S = 10.0


class HeldChecks(UsersFile):
    """A users file whose password checks wait until released, counting how many run."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.cond = threading.Condition()
        self.running = 0
        self.most = 0

    def authenticate(self, name: str, password: str) -> User | None:
        with self.cond:
            self.running += 1
            self.most = max(self.most, self.running)
            self.cond.notify_all()
        self.release.wait(DEADLINE_S)
        with self.cond:
            self.running -= 1
        return None  # a wrong password


def test_checks_beyond_the_bound_are_refused_as_busy_and_the_rest_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(access_module, "PASSWORD_CHECK_WAIT_S", 0.2)
    users = HeldChecks()
    access = Access("token", users)
    outcomes: list[BaseException] = []

    def connect(n: int) -> None:
        try:
            access.authenticate({"user": "mallory", "secret": f"guess-{n}"})
        except (NotAuthorized, LimitReached) as exc:
            outcomes.append(exc)

    held = [threading.Thread(target=connect, args=(n,)) for n in range(PASSWORD_CHECKS_AT_ONCE)]
    for thread in held:
        thread.start()
    with users.cond:
        assert users.cond.wait_for(
            lambda: users.running == PASSWORD_CHECKS_AT_ONCE, timeout=DEADLINE_S
        )
    with pytest.raises(LimitReached, match="password checks at once"):
        access.authenticate({"user": "mallory", "secret": "one more"})
    # the HTTP monitor waits for no turn: a request waiting holds one of its few threads
    monkeypatch.setattr(access_module, "PASSWORD_CHECK_WAIT_S", 3 * DEADLINE_S)
    started = time.monotonic()
    with pytest.raises(LimitReached, match="password checks at once"):
        http_authenticate(access, "Basic " + base64.b64encode(b"mallory:again").decode())
    assert time.monotonic() - started < DEADLINE_S  # not the 30 s a connection may wait
    assert access.authenticate({"user": "owner", "secret": "token"}).name == "owner"
    users.release.set()
    for thread in held:
        thread.join(DEADLINE_S)
    assert users.most == PASSWORD_CHECKS_AT_ONCE
    assert [type(exc) for exc in outcomes] == [NotAuthorized] * PASSWORD_CHECKS_AT_ONCE
