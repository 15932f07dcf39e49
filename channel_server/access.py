"""Who may call the broker and its name server, and what each user may do (server side).

Every connection authenticates once, in Pyro5's handshake (:meth:`Access.admit`): the local
token makes it the ``owner``; a user of the users file gives its password. A connection
that fails is refused before it can call anything, and the refusal is logged. Each call
then checks the connection's user against the channel it touches (:meth:`Access.require`);
a missing permission is a typed ``NotAuthorized``, logged too. Calls made in-process (no
connection: the broker itself, tests) act as the owner.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from Pyro5.callcontext import current_context

from channel_server import proofs
from channel_server.connection_shares import USER_ATTRIBUTE as USER_ATTRIBUTE
from channel_server.credentials import MONITOR_TOKEN_FILE, OWNER, SERVER_ROLE, monitor_token
from channel_server.errors import LimitReached, NotAuthorized
from channel_server.guard import peer_of
from channel_server.log_throttle import Throttle
from channel_server.users import (
    Action,
    User,
    UsersFile,
    owner,
    owns_publisher_id,
    publisher_id_owner,
)
from channel_server.users_reload import ReloadedUsers

log = logging.getLogger(__name__)
VERIFIED_MAX = 1024
PASSWORD_CHECKS_AT_ONCE = 2
"""Passwords checked with argon2 at the same time: each check takes 64 MiB and a core for
~0.1 s, so strangers sending wrong passwords on every connection could otherwise take
gigabytes and every CPU (one check per core of this machine kind)."""
PASSWORD_CHECK_WAIT_S = 2.0
"""How long a connection waits for a turn to have its password checked before it is
refused as busy (the clients retry refused connections)."""


NO_CREDENTIAL = "no credential"
"""Why a connection that named no user is refused (logged at INFO: every broker's start
probes its name server so)."""


class Access:
    """The judge of one broker: its token and, optionally, a users file (read again when
    it changes). Any thread may call it: ``_lock`` guards ``_verified`` and
    ``_generation``, the rest is read-only."""

    def __init__(
        self, token: str, users: UsersFile | None = None, users_path: Path | None = None
    ) -> None:
        """``users_path``: the file ``users`` was read from, read again when it changes
        (:mod:`~channel_server.users_reload`)."""
        self._token = token
        self.monitor_token = monitor_token(token)
        """What the HTTP monitor takes from the owner (never the token itself)."""
        self._fixed_users = users
        self._reloaded = (
            ReloadedUsers(users_path, users) if users is not None and users_path else None
        )
        self._generation = 0
        """The users' generation ``_verified`` was filled in (guarded by ``_lock``)."""
        self._owner = owner()
        self._lock = threading.Lock()
        self._verified: dict[tuple[str, bytes], User] = {}
        """(user, digest of its password) that passed argon2 once: a KDF costs ~0.1 s,
        too much for every connection of a busy client (failures are never kept)."""
        self._owner_proofs = proofs.Proofs(token, OWNER)
        self._checking = threading.BoundedSemaphore(PASSWORD_CHECKS_AT_ONCE)
        self._busy_log = Throttle(log)
        self._refused_log = Throttle(log)
        """Refused handshakes, logged once per 10 s with the count left out: a stranger
        could otherwise fill the disk with them (each names its user, cut at 200
        characters)."""

    def admit(self, conn: Any, data: Any) -> Any:
        """Pyro5's handshake hook: remember the caller's user on its connection and
        answer (with a proof of the token to a caller that proved it), or refuse the
        connection (the client gets the reason)."""
        try:
            user, answer = self._admit(conn, data)
        except NotAuthorized as exc:
            if exc.reason == NO_CREDENTIAL:  # a probe (a broker checks that a name server
                log_as = self._refused_log.info  # refuses strangers), not a wrong secret
            else:
                log_as = self._refused_log.warning
            log_as("refused", "refused a connection from %s: %.200s", peer_of(conn), exc.reason)
            raise
        except LimitReached as exc:
            self._busy_log.warning("busy", "refused a connection from %s: %s", peer_of(conn), exc)
            raise
        setattr(conn, USER_ATTRIBUTE, user)
        return answer

    def _admit(self, conn: Any, data: Any) -> tuple[User, Any]:
        """Over the wire the owner proves it knows the token (it is never sent: see
        :mod:`~channel_server.proofs`); a user of the users file gives its password."""
        if not (isinstance(data, dict) and data.get("user") == OWNER):
            return self.authenticate(data), "welcome"
        target = getattr(conn, proofs.PROOF_TARGET)
        nonce = self._owner_proofs.admit(data, target)
        if nonce is None:
            raise NotAuthorized(self._refusal(data, target))
        return self._owner, proofs.answer(self._token, SERVER_ROLE, nonce)

    def _refusal(self, data: dict, target: proofs.Target) -> str:
        """Why the owner's handshake was refused (a client older than this broker sent
        the token itself, or a proof of it made for no daemon in particular)."""
        if "secret" in data or "to" not in data:
            return "a client older than this broker (no proof made for it): upgrade the client"
        return self._owner_proofs.refusal(data, "wrong credential for user 'owner'", target)

    def monitor_owner(self, secret: str) -> User:
        """The owner, for the HTTP monitor: ``secret`` must be the monitor token. The
        local token itself is refused there, saying why: sent over plain HTTP, it would
        make whoever holds the monitor's port the owner of every daemon."""
        if hmac.compare_digest(secret.encode(), self.monitor_token.encode()):
            return self._owner
        if hmac.compare_digest(secret.encode(), self._token.encode()):
            raise NotAuthorized(
                "the local token is not taken over HTTP (it would cross the wire as it is): "
                f"use the monitor token, in the state dir's {MONITOR_TOKEN_FILE} file"
            )
        raise NotAuthorized("wrong credential for user 'owner'")

    def authenticate(self, data: Any, wait_s: float | None = None) -> User:
        """The user of a credential; NotAuthorized, or LimitReached when no password check
        is free within ``wait_s`` (None: PASSWORD_CHECK_WAIT_S; the HTTP monitor waits
        none: a request waiting holds one of its few request threads)."""
        if not isinstance(data, dict) or not data.get("user"):
            raise NotAuthorized(NO_CREDENTIAL)
        name, secret = data.get("user"), data.get("secret")
        if type(name) is not str or type(secret) is not str:
            raise NotAuthorized("a malformed credential")
        if name == OWNER:
            if hmac.compare_digest(secret.encode(), self._token.encode()):
                return self._owner
        elif self._users is None:
            raise NotAuthorized(
                f"no user {name!r} here: this daemon was started without a users file "
                "(give it the same --users FILE as the others)"
            )
        elif user := self._password_user(name, secret, wait_s):
            return user
        raise NotAuthorized(f"wrong credential for user {name!r}")

    @property
    def _users(self) -> UsersFile | None:
        """The users as the file now says (a fixed set without a path)."""
        if self._reloaded is None:
            return self._fixed_users
        users = self._reloaded.current()
        if self._reloaded.generation != self._generation:
            with self._lock:  # passwords and grants may have changed: check them anew
                self._verified.clear()
                self._generation = self._reloaded.generation
        return users

    def _password_user(self, name: str, password: str, wait_s: float | None) -> User | None:
        key = (name, hashlib.sha256(password.encode()).digest())
        with self._lock:
            if (known := self._verified.get(key)) is not None:
                return known
        user = self._check_password(name, password, wait_s)
        if user is not None:
            with self._lock:
                if len(self._verified) >= VERIFIED_MAX:
                    self._verified.clear()
                self._verified[key] = user
        return user

    def _check_password(self, name: str, password: str, wait_s: float | None) -> User | None:
        """argon2, a bounded number at a time: LimitReached when no turn comes in time."""
        if self._users is None:
            return None
        if not self._checking.acquire(timeout=PASSWORD_CHECK_WAIT_S if wait_s is None else wait_s):
            raise LimitReached("password checks at once", PASSWORD_CHECKS_AT_ONCE, "the broker")
        try:
            return self._users.authenticate(name, password)
        finally:
            self._checking.release()

    @property
    def users_generation(self) -> int:
        """Counts the readings of the users file (0 for a fixed set of users): who keeps
        what a user may do looks again when it moves."""
        if self._reloaded is None:
            return 0
        self._reloaded.current()  # reads the file again if it changed
        return self._reloaded.generation

    def may(self, user_name: str, action: Action, channel: str) -> bool:
        """Whether the user of that name may still do ``action`` on ``channel``, as the
        users file says now (the owner always may; without a users file there is no
        other user)."""
        if user_name == OWNER or (users := self._users) is None:
            return True
        user = users.find(user_name)
        return user is not None and user.allows(action, channel)

    def current(self) -> User:
        """The user of the call being served (the owner for an in-process call)."""
        conn = current_context.client
        if conn is None:
            return self._owner
        user = getattr(conn, USER_ATTRIBUTE, None)
        if user is None:  # cannot happen past the handshake; refuse rather than guess
            raise NotAuthorized("unauthenticated connection")
        if user.name == OWNER or (users := self._users) is None:
            return user
        latest = users.find(user.name)  # its grants as the users file says now
        if latest is None:
            raise NotAuthorized(f"user {user.name!r} is no longer in the users file")
        return latest

    def require(self, action: Action, channel: str) -> User:
        """The current user, if it may do ``action`` on ``channel``; else NotAuthorized."""
        user = self.current()
        if not user.allows(action, channel):
            self._refuse(user, f"{action.value} on channel {channel!r}", action, channel)
        return user

    def require_any(self, channel: str) -> User:
        """The current user, if it has any permission on ``channel`` (to read its state)."""
        user = self.current()
        if not user.allows_any(channel):
            self._refuse(user, f"no permission on channel {channel!r}", None, channel)
        return user

    def require_broker(self, what: str) -> User:
        """The current user, if it is a broker (names in the name server are theirs)."""
        user = self.current()
        if not user.broker:
            self._refuse(user, what, None, "")
        return user

    def require_publisher(self, publisher_ids: Iterable[str], channel: str) -> User:
        """The current user, if it may publish (or follow a publisher's progress) as each
        of ``publisher_ids`` on ``channel``: a user of the users file as its own ids
        (:func:`~channel_server.users.owns_publisher_id`), the owner and the channel's
        admins as any (``publisher_ids`` is not read for them)."""
        user = self.current()
        if user.name == OWNER or user.allows(Action.ADMIN, channel):
            return user
        users = self._users
        names = users.names() if users is not None else []
        for publisher_id in set(publisher_ids):
            if not owns_publisher_id(user.name, publisher_id, names):
                self._refuse(
                    user, self._not_its_id(user, publisher_id, names), Action.PUBLISH, channel
                )
        return user

    @staticmethod
    def _not_its_id(user: User, publisher_id: str, names: list[str]) -> str:
        if (other := publisher_id_owner(publisher_id, names)) not in (None, user.name):
            return f"publish as {publisher_id!r} (it is user {other!r}'s publisher id)"
        return (
            f"publish as {publisher_id!r} (its publisher ids are {user.name!r} and "
            f"{user.name!r} then - or . and more)"
        )

    def require_owner(self, member_user: str, subscriber_id: str, channel: str) -> User:
        """The current user, if ``subscriber_id`` is its own (or it is an admin)."""
        user = self.current()
        if user.name != member_user and not user.allows(Action.ADMIN, channel):
            self._refuse(user, f"subscriber id {subscriber_id!r} belongs to another user")
        return user

    def require_group(self, users: set[str], group: str, channel: str) -> User:
        """The current user, if it is one of ``users`` (those of a group's subscribers)
        or an admin of the channel."""
        user = self.current()
        if user.name not in users and not user.allows(Action.ADMIN, channel):
            self._refuse(user, f"join group {group!r} (its subscribers are another user's)")
        return user

    def _refuse(
        self, user: User, what: str, action: Action | None = None, channel: str = ""
    ) -> None:
        conn = current_context.client
        log.warning("refused %s to user %s from %s", what, user.name, peer_of(conn))
        raise NotAuthorized(
            f"user {user.name!r} may not: {what}", action.value if action else "", channel
        )
