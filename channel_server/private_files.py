"""Private files and directories of brokers and clients: 0700 directories, 0600 files,
never opened through a symbolic link, atomic replacement.

Every directory made here is 0700 and every file 0600, whatever the process umask; a wider
mode found on an existing one is tightened (and logged); a path another user owns is
refused. It sits beside ``errors`` and ``names`` (no Pyro5, no broker code) because both
sides keep files: the broker its store, token and users, the clients their state.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from channel_server.errors import StoreError

log = logging.getLogger(__name__)

STATE_DIR_ENV = "PUBSUB_STATE_DIR"
DIR_MODE = 0o700
FILE_MODE = 0o600


def default_state_dir() -> Path:
    """``$PUBSUB_STATE_DIR``, else ``$XDG_STATE_HOME/pubsub-channels``, else
    ``~/.local/state/pubsub-channels``."""
    if env := os.environ.get(STATE_DIR_ENV):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "pubsub-channels"


def private_dir(path: Path, what: str = "state dir") -> Path:
    """Make ``path`` (and missing parents) with mode 0700, or tighten an existing one that
    is wider (logged as ``<what> <path> was <mode>; tightened to 0700``). Refuses a path
    that is not a directory or belongs to another user (followed through a symbolic link:
    a link to a directory of one's own is fine)."""
    path = Path(path)
    missing: list[Path] = []
    candidate = path
    try:
        while not candidate.exists() and candidate != candidate.parent:
            missing.append(candidate)
            candidate = candidate.parent
        for directory in reversed(missing):
            with contextlib.suppress(FileExistsError):  # made by someone else meanwhile
                os.mkdir(directory, DIR_MODE)
        if path in missing:
            os.chmod(path, DIR_MODE)  # exactly 0700, whatever the umask took away
        st = os.stat(path)
    except OSError as exc:
        raise StoreError(str(path), f"cannot use the {what}: {os_reason(exc)}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(str(path), f"cannot use the {what}: not a directory")
    _tighten(path, st, DIR_MODE, what, lambda mode: os.chmod(path, mode))
    _check_ancestors(path, what)
    return path


def _check_ancestors(path: Path, what: str) -> None:
    """Refuse a directory inside one that another user could rename it out of: one that
    user owns (root aside), or that everyone may write without the sticky bit, as /tmp has
    (session 33: a user who made ``pubsub-data`` first moved a broker's data dir away
    while it was stopped, and the broker came back empty)."""
    for parent in path.resolve().parents:
        st = os.stat(parent)
        if st.st_uid not in (os.geteuid(), 0):
            raise StoreError(
                str(path),
                f"cannot use the {what}: {parent} belongs to uid {st.st_uid}, who could move "
                "it away",
            )
        if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            raise StoreError(
                str(path),
                f"cannot use the {what}: anyone may write {parent}, and so move it away "
                "(chmod o-w or +t it)",
            )


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically: a 0600 temp file (never through a link),
    fsync, rename. The directory must exist (see :func:`private_dir`)."""
    tmp = None
    try:
        # A name of its own (mkstemp: 0600, O_EXCL), so that writers of the same file in
        # two threads or processes never write or remove each other's temp file.
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise StoreError(str(path), f"cannot write: {os_reason(exc)}") from None


def open_private_append(path: Path, *, readable: bool = False) -> IO[str]:
    """Open ``path`` for appending (and reading with ``readable``), creating it 0600 and
    tightening a wider existing file; never through a symbolic link."""
    flags = (os.O_RDWR if readable else os.O_WRONLY) | os.O_APPEND | os.O_CREAT
    try:
        fd = open_private_fd(path, flags)
    except OSError as exc:
        raise StoreError(str(path), f"cannot open: {os_reason(exc)}") from None
    try:
        _tighten(path, os.fstat(fd), FILE_MODE, "file", lambda mode: os.fchmod(fd, mode))
        return os.fdopen(fd, "a+" if readable else "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def tighten_private(path: Path) -> None:
    """Make an existing file 0600 if it is wider (logged); nothing when it does not exist.
    Refuses a symbolic link."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(str(path), f"cannot use: {os_reason(exc)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(str(path), "not a regular file (a symbolic link?); move it away")
    _tighten(path, st, FILE_MODE, "file", lambda mode: os.chmod(path, mode))


def open_private_fd(path: Path, flags: int) -> int:
    """A descriptor of a regular file created 0600 (exactly: the umask cannot take the
    owner's bits away), never opened through a symbolic link."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(str(path), "not a regular file; move it away")
        if flags & os.O_EXCL:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _tighten(
    path: Path, st: os.stat_result, mode: int, what: str, chmod: Callable[[int], None]
) -> None:
    """Refuse what another user owns; narrow a mode wider than ``mode`` with ``chmod``."""
    if st.st_uid != os.geteuid():
        raise StoreError(
            str(path), f"{what} belongs to uid {st.st_uid}, not to this user ({os.geteuid()})"
        )
    if (old := stat.S_IMODE(st.st_mode)) & ~mode:
        try:
            chmod(mode)
        except OSError as exc:
            raise StoreError(str(path), f"cannot tighten to {mode:04o}: {os_reason(exc)}") from None
        log.warning("%s %s was %04o; tightened to %04o", what, path, old, mode)


def os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symbolic link; refusing to follow it"
    return exc.strerror or str(exc)
