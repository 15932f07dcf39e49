"""Users of a broker and what each may do, per channel-name pattern.

A users file (YAML) maps a name to an argon2 password hash and a list of grants::

    users:
      alice:
        password: "$argon2id$v=19$m=65536,t=3,p=4$..."   # only a hash, never clear text
        allow:
          - {channels: "orders*", actions: [publish, subscribe]}
          - {channels: "reports", actions: [admin]}

No Pyro5, no threads: the broker authenticates with :meth:`UsersFile.authenticate` and
asks :meth:`User.allows` before each call.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any

import argon2
import yaml
from argon2.exceptions import InvalidHashError, VerificationError

from channel_server.errors import InvalidArgument
from channel_server.private_files import write_private

log = logging.getLogger(__name__)

OWNER = "owner"
"""The implicit user of the local token; reserved, so no users-file entry may take it."""
USER_NAME_PATTERN = r"[A-Za-z0-9._-]{1,64}"
_USER_NAME_RE = re.compile(USER_NAME_PATTERN)
# Channel-name characters (wire.NAME_PATTERN) plus the glob characters * ? [ ] !
_GRANT_PATTERN_RE = re.compile(r"[A-Za-z0-9._*?\[\]!-]{1,128}")


class Action(StrEnum):
    """What a grant allows on the channels it matches."""

    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    """subscribe, get, ack, heartbeat, unsubscribe of its own subscriber ids"""
    ADMIN = "admin"
    """create channels, kill_queues, dead letters read/replay, status of all members;
    implies publish and subscribe"""


ALL_ACTIONS = frozenset(Action)


@dataclass(frozen=True)
class Grant:
    """``actions`` on every channel whose whole name matches the glob ``pattern``."""

    pattern: str
    actions: frozenset[Action]

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or not _GRANT_PATTERN_RE.fullmatch(self.pattern):
            raise ValueError(
                f"bad channel pattern {self.pattern!r}: must be 1-128 characters of "
                "[A-Za-z0-9._-] and the globs * ? [ ] !"
            )
        if not self.actions:
            raise ValueError(f"no actions for channel pattern {self.pattern!r}")
        object.__setattr__(self, "actions", frozenset(_action(a) for a in self.actions))

    def covers(self, action: Action, channel: str) -> bool:
        """True if this grant allows ``action`` on ``channel`` (ADMIN implies the others)."""
        allowed = action in self.actions or Action.ADMIN in self.actions
        return allowed and fnmatchcase(channel, self.pattern)

    def action_names(self) -> list[str]:
        """The actions in the canonical order publish, subscribe, admin."""
        return [a.value for a in Action if a in self.actions]

    def to_dict(self) -> dict[str, Any]:
        """The users-file (and JSON) form ``{channels: ..., actions: [...]}``."""
        return {"channels": self.pattern, "actions": self.action_names()}

    def __str__(self) -> str:
        """The command-line form ``ACTIONS:PATTERN`` (see :func:`parse_grant`)."""
        return f"{','.join(self.action_names())}:{self.pattern}"


def _action(value: Any) -> Action:
    try:
        return Action(value)
    except ValueError:
        known = ", ".join(a.value for a in Action)
        raise ValueError(f"unknown action {value!r} (known: {known})") from None


def parse_grant(text: str) -> Grant:
    """Parse ``ACTIONS:PATTERN``, e.g. ``publish,subscribe:orders*`` or ``admin:*``."""
    actions, sep, pattern = text.partition(":")
    if not sep:
        raise ValueError(f"grant {text!r} is not ACTIONS:PATTERN (e.g. publish:orders*)")
    names = [name.strip() for name in actions.split(",") if name.strip()]
    return Grant(pattern, frozenset(_action(name) for name in names))


PUBLISHER_ID_SEPARATORS = ("-", ".")


def owns_publisher_id(user: str, publisher_id: str, others: Iterable[str] = ()) -> bool:
    """Whether a user of the users file publishes as ``publisher_id``: its name, or its
    name then ``-`` or ``.`` and more (``bob``, ``bob-1``, ``bob.orders``), unless the id
    is as much another user's with a longer name (``bob-x.1`` is user ``bob-x``'s, not
    ``bob``'s), so that no two users share one. Ids are unique per publisher id, so one
    that another user could take would let it block this one's ids (publish them first,
    and the owner's own events are reported as duplicates) and read its progress."""
    return _extends(publisher_id, user) and not any(
        len(other) > len(user) and _extends(publisher_id, other) for other in others
    )


def publisher_id_owner(publisher_id: str, names: Iterable[str]) -> str | None:
    """The user (of ``names``) that publishes as ``publisher_id``: the longest name it
    extends."""
    owners = [name for name in names if _extends(publisher_id, name)]
    return max(owners, key=len) if owners else None


def _extends(publisher_id: str, name: str) -> bool:
    if publisher_id == name:
        return True
    return publisher_id.startswith(tuple(name + sep for sep in PUBLISHER_ID_SEPARATORS))


DECISIONS_KEPT = 1024
"""Permission answers a user keeps (per action and channel name asked about)."""


@dataclass(frozen=True)
class User:
    """An authenticated caller; ``broker`` may (un)register names in the name server."""

    name: str
    grants: tuple[Grant, ...]
    broker: bool = False
    _decisions: dict[tuple[Action, str], bool] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    """What :meth:`allows` answered: every call asks it, and a user's grants never change
    (users are made when the users file is read). Emptied when full (a cache, not a
    record)."""

    def allows(self, action: Action, channel: str) -> bool:
        """True if some grant allows ``action`` on ``channel``."""
        decision = self._decisions.get((action, channel))
        if decision is None:
            decision = any(grant.covers(action, channel) for grant in self.grants)
            if len(self._decisions) >= DECISIONS_KEPT:
                self._decisions.clear()
            self._decisions[action, channel] = decision
        return decision

    def allows_any(self, channel: str) -> bool:
        """True if some grant allows anything at all on ``channel``."""
        return any(fnmatchcase(channel, grant.pattern) for grant in self.grants)


def owner() -> User:
    """The user of the local token: everything on every channel, and the broker's rights."""
    return User(OWNER, (Grant("*", ALL_ACTIONS),), broker=True)


# -- passwords ---------------------------------------------------------------------------
_STRONG = argon2.PasswordHasher()
_CHEAP = argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
_hasher = _STRONG


def set_test_parameters(cheap: bool = True) -> None:
    """Hash with very low argon2 costs (tests only); ``cheap=False`` restores the default."""
    global _hasher
    _hasher = _CHEAP if cheap else _STRONG


def hash_password(password: str) -> str:
    """An argon2id hash of ``password`` (salted, with its parameters encoded)."""
    return _hasher.hash(password)


def verify_password(hashed: str, password: str) -> bool:
    """True if ``password`` matches ``hashed``; False on mismatch or a malformed hash."""
    try:
        return _hasher.verify(hashed, password)
    except (VerificationError, InvalidHashError, UnicodeError):
        return False


@cache
def _dummy_hash(hasher: argon2.PasswordHasher) -> str:
    """A hash to verify against for unknown users, so the time taken reveals no names."""
    return hasher.hash(secrets.token_urlsafe(16))


def _check_hash(hashed: Any) -> str:
    if not isinstance(hashed, str) or not hashed.startswith("$argon2"):
        raise ValueError("password must be an argon2 hash ($argon2...), never clear text")
    try:
        argon2.extract_parameters(hashed)
    except InvalidHashError:
        raise ValueError("password is a malformed argon2 hash") from None
    return hashed


def check_user_name(name: Any) -> str:
    """``name`` if it is a valid user name, else ValueError with the reason."""
    if not isinstance(name, str) or not _USER_NAME_RE.fullmatch(name):
        raise ValueError(f"bad user name {name!r}: must be 1-64 characters of [A-Za-z0-9._-]")
    if name == OWNER:
        raise ValueError(f"user name {OWNER!r} is reserved for the local token")
    return name


# -- the users file ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Account:
    hashed: str
    user: User


@contextmanager
def _at(where: str) -> Iterator[None]:
    """Prefix a ValueError's reason with where in the file it happened."""
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _mapping(value: Any, keys: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("not a mapping")
    if unknown := sorted(map(str, set(value) - keys)):
        raise ValueError(f"unknown key(s) {', '.join(unknown)}")
    if missing := sorted(required - set(value)):
        raise ValueError(f"missing key(s) {', '.join(missing)}")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError("not a list")
    return value


def _grant_from(entry: Any) -> Grant:
    entry = _mapping(entry, {"channels", "actions"}, {"channels", "actions"})
    return Grant(entry["channels"], frozenset(_action(a) for a in _list(entry["actions"])))


def _account_from(name: Any, entry: Any) -> _Account:
    where = f"users.{name}"
    with _at(where):
        check_user_name(name)
        entry = _mapping(entry, {"password", "allow"}, {"password"})
    with _at(f"{where}.password"):
        hashed = _check_hash(entry["password"])
    with _at(f"{where}.allow"):
        allow = _list(entry.get("allow") or [])
    grants = []
    for i, grant in enumerate(allow):
        with _at(f"{where}.allow[{i}]"):
            grants.append(_grant_from(grant))
    return _Account(hashed, User(name, tuple(grants)))


def _read_checked(path: Path) -> str:
    """The text of a users file no one but this user (or root) may change: checked on the
    descriptor it is read from (a check of the path, then a read of the path, let a user
    who could write the directory swap another file in between), not through a link, in a
    directory only they may rename files in."""
    _check_directory(path.parent)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, encoding="utf-8") as file:
        st = os.fstat(fd)
        _check_owner(path, st, "users file")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise InvalidArgument(
                str(path), "other users may write to this users file (chmod 600 it)"
            )
        return file.read()


def _check_directory(directory: Path) -> None:
    st = directory.stat()
    _check_owner(directory, st, "the users file's directory")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise InvalidArgument(
            str(directory),
            "other users may replace the users file in this directory (chmod 700 it)",
        )


def _check_owner(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid not in (os.geteuid(), 0):
        raise InvalidArgument(
            str(path), f"{what} belongs to uid {st.st_uid}, not to this user or root"
        )


class UsersFile:
    """The users of a broker: names, password hashes and grants; loaded and saved as YAML."""

    def __init__(self, accounts: dict[str, _Account] | None = None) -> None:
        self._accounts: dict[str, _Account] = dict(accounts or {})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UsersFile) and self._accounts == other._accounts

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> UsersFile:
        """Read and validate ``path``; InvalidArgument names the file and the bad entry.
        A file that grants rights must be this user's (or root's) and writable by its
        owner alone: anyone who can write it can make themselves an admin."""
        try:
            data = yaml.safe_load(_read_checked(Path(path)))
        except (OSError, UnicodeError) as exc:
            raise InvalidArgument(str(path), f"cannot read users file: {exc}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark else ""
            raise InvalidArgument(str(path), f"not valid YAML{at}") from None
        try:
            with _at("top level"):
                users = _mapping(data, {"users"}, {"users"})["users"] or {}
            if not isinstance(users, dict):
                raise ValueError("users: not a mapping")
            return cls({name: _account_from(name, e) for name, e in users.items()})
        except ValueError as exc:
            raise InvalidArgument(str(path), str(exc)) from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically (temporary file, fsync, rename) with mode 0600."""
        path = Path(path)
        if path.parent.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            log.warning(
                "%s: directory is group/world writable; others may replace the users file",
                path.parent,
            )
        users = {
            name: {"password": a.hashed, "allow": [g.to_dict() for g in a.user.grants]}
            for name, a in sorted(self._accounts.items())
        }
        text = yaml.safe_dump({"users": users}, sort_keys=False, default_flow_style=None)
        write_private(path, text)

    def authenticate(self, name: str, password: str) -> User | None:
        """The user if ``password`` is right, else None; unknown names cost the same time."""
        account = self._accounts.get(name)
        ok = verify_password(account.hashed if account else _dummy_hash(_hasher), password)
        return account.user if account and ok else None

    def add(self, name: str, password: str, grants: Iterable[Grant], replace: bool = False) -> User:
        """Add (or with ``replace`` overwrite) a user; the password is stored hashed."""
        try:
            check_user_name(name)
        except ValueError as exc:
            raise InvalidArgument("user name", str(exc)) from None
        if name in self._accounts and not replace:
            raise InvalidArgument(name, "user already exists")
        if not password:
            raise InvalidArgument("password", "must not be empty")
        user = User(name, tuple(grants))
        self._accounts[name] = _Account(hash_password(password), user)
        return user

    def remove(self, name: str) -> None:
        """Remove a user; InvalidArgument if there is none of that name."""
        if self._accounts.pop(name, None) is None:
            raise InvalidArgument(name, "no such user")

    def names(self) -> list[str]:
        """The user names, sorted."""
        return sorted(self._accounts)

    def find(self, name: str) -> User | None:
        """The user of that name, if there is one."""
        account = self._accounts.get(name)
        return account.user if account is not None else None

    def users(self) -> list[User]:
        """The users (without their hashes), sorted by name."""
        return [self._accounts[name].user for name in self.names()]
