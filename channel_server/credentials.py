"""Who a process is to the service: its credential, and where the local one lives.

Zero set-up on one machine, as Jupyter's token: the first broker an OS user starts creates a
random token in that user's state directory (``token``, mode 0600) and in its own data dir;
every client of the same user finds it there and connects as the ``owner``. Other local
users cannot read it, so their processes are refused. For more users, a client names a
user and password from a file (``--credentials FILE``, or ``$PUBSUB_CREDENTIALS``) or from
``$PUBSUB_USER`` / ``$PUBSUB_PASSWORD`` — never from the command line.

Light on purpose (no Pyro5): the wire vocabulary imports it in every client.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from channel_server import proofs
from channel_server.errors import InvalidArgument
from channel_server.private_files import (
    STATE_DIR_ENV,
    default_state_dir,
    private_dir,
    write_private,
)

log = logging.getLogger(__name__)
__all__ = ["STATE_DIR_ENV", "Credential", "ambient", "ensure_token", "from_file", "state_root"]
CREDENTIALS_ENV = "PUBSUB_CREDENTIALS"
USER_ENV = "PUBSUB_USER"
PASSWORD_ENV = "PUBSUB_PASSWORD"
TOKEN_FILE = "token"
OWNER = "owner"
"""The user of the local token: everything is allowed to it."""
TOKEN_BYTES = 32


SERVER_ROLE = "server"
"""The role a broker or name server proves the local token under, in its answer."""


@dataclass(frozen=True)
class Credential:
    user: str
    secret: str

    def handshake(self, to: int) -> dict[str, Any]:
        """What a proxy sends when it connects (Pyro5's handshake) to the daemon at port
        ``to``. The local token never crosses the wire: a proof of it, made for that
        daemon, does (:mod:`~channel_server.proofs`). A password does: the broker keeps
        only its argon2 hash, so it could check no proof of it (use TLS where that
        matters)."""
        if self.user == OWNER:
            return proofs.handshake(self.secret, OWNER, to)
        return {"user": self.user, "secret": self.secret}

    @property
    def answer_role(self) -> str | None:
        """The role under which the daemon must prove it knows the secret too, before
        anything is sent to it (None: it cannot)."""
        return SERVER_ROLE if self.user == OWNER else None

    def __repr__(self) -> str:  # never print the secret
        return f"Credential({self.user!r}, ***)"


def state_root() -> Path:
    """Where a user's clients keep their state (and the local token)."""
    return default_state_dir()


def ambient(state_dir: Path | None = None) -> Credential | None:
    """The credential of this process: ``$PUBSUB_CREDENTIALS`` (a file), else
    ``$PUBSUB_USER`` and ``$PUBSUB_PASSWORD``, else the local token of this OS user."""
    if path := os.environ.get(CREDENTIALS_ENV):
        return from_file(Path(path))
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if user and password:
        return Credential(user, password)
    token = read_token(state_dir or state_root())
    return Credential(OWNER, token) if token else None


def from_file(path: Path) -> Credential:
    """A credentials file: ``{user: NAME, password: SECRET}`` (YAML or JSON). Anything
    else is a one-line InvalidArgument naming the file."""
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _bad_file(path, f"cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise _bad_file(path, "not a text file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise _bad_file(path, f"not valid YAML{where}") from None
    if not isinstance(data, dict) or not {"user", "password"} <= data.keys():
        raise _bad_file(path, "needs 'user' and 'password'")
    user, password = data["user"], data["password"]
    if type(user) is not str or type(password) is not str or not user or not password:
        raise _bad_file(path, "'user' and 'password' must be non-empty strings (quote them)")
    if _wider_than_private(path):
        log.warning("%s is readable by other users: make it 0600", path)
    return Credential(user, password)


def _bad_file(path: Path, reason: str) -> InvalidArgument:
    return InvalidArgument("credentials", f"{path}: {reason}")


def read_token(directory: Path) -> str | None:
    """The token kept in ``directory``; None when there is none, or when it is not this
    user's alone: a file or directory another user owns, or one others may write to (then
    someone else chose it, and an owner's token they know is theirs too: logged)."""
    path = directory / TOKEN_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, encoding="ascii") as handle:
        try:
            planted = _not_ours(directory, os.fstat(handle.fileno()))
            token = None if planted else handle.read().strip()
        except (OSError, UnicodeDecodeError):
            return None
    if planted:
        log.warning("ignoring the token in %s: %s", path, planted)
    return token or None


def _not_ours(directory: Path, st: os.stat_result) -> str | None:
    """Why a token file (``st``) in ``directory`` may have been put there by someone else
    (None: only this user can have written it)."""
    me = os.geteuid()
    if st.st_uid != me:
        return f"it belongs to uid {st.st_uid}, not to this user ({me})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "other users may write to it"
    dir_st = os.stat(directory)
    if dir_st.st_uid != me:
        return f"its directory belongs to uid {dir_st.st_uid}, not to this user ({me})"
    if dir_st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "other users may write to its directory"
    return None


MONITOR_TOKEN_FILE = "monitor-token"
"""Beside the token in the state dir: what the HTTP monitor takes (:func:`monitor_token`)."""


def monitor_token(token: str) -> str:
    """What the HTTP monitor takes as the owner's password or bearer token: derived from
    the local token and good for nothing else. Over plain HTTP it crosses the wire as it
    is, to whoever holds the monitor's port while the broker is away; the local token,
    which makes its holder the owner of every daemon, never does."""
    return proofs.mac(token, "pubsub http monitor")


def read_monitor_token(directory: Path) -> str | None:
    """The monitor token of the token kept in ``directory`` (None without one)."""
    token = read_token(directory)
    return None if token is None else monitor_token(token)


def ensure_token(state_dir: Path, data_dir: Path | None = None) -> str:
    """The local token, created if there is none (broker side): the user's state dir
    copy wins (every broker of one user shares it), else the data dir's; both are written,
    0600, in 0700 directories. A directory another user owns is refused (StoreError)
    before any token is read from it."""
    directories = [private_dir(state_dir)]
    if data_dir is not None:
        directories.append(private_dir(data_dir, "data dir"))
    token = next(filter(None, map(read_token, directories)), None)
    token = token or secrets.token_urlsafe(TOKEN_BYTES)
    for directory in directories:
        if read_token(directory) != token:
            write_private(directory / TOKEN_FILE, token + "\n")
    write_private(directories[0] / MONITOR_TOKEN_FILE, monitor_token(token) + "\n")
    return token


def _wider_than_private(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except OSError:
        return False
