"""Private files of clients and brokers: state directories, checked names, small JSON state.

Every directory made here is 0700 and every file 0600, whatever the process umask; a wider
mode found on an existing one is tightened (and logged). A file name is built from plain
parts (:func:`state_path`) and checked before anything is written, and a file is never
created through a symbolic link. State files are written atomically (temp file, fsync,
rename), so a crash leaves the old or the new state, never a torn one.

Bad names are :class:`InvalidArgument`; a directory or file that cannot be used, or a state
file that is not what it should be, is a one-line :class:`StoreError` naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from channel_server.errors import InvalidArgument, StoreError
from channel_server.names import NAME_PATTERN

log = logging.getLogger(__name__)
STATE_DIR_ENV = "PUBSUB_STATE_DIR"
DIR_MODE = 0o700
FILE_MODE = 0o600
NAME_PART_RE = re.compile(NAME_PATTERN)
"""A channel, group or subscriber name, as it may appear in a state file's name."""
NAME_MAX = 255
"""The longest file name most file systems take."""


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
        raise StoreError(str(path), f"cannot use the {what}: {_reason(exc)}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(str(path), f"cannot use the {what}: not a directory")
    _tighten(path, st, DIR_MODE, what, lambda mode: os.chmod(path, mode))
    return path


def state_path(directory: Path, *name_parts: str, suffix: str = "") -> Path:
    """``directory / "<part>-<part>...<suffix>"``, refusing (InvalidArgument) any part that
    is not a plain name (1-128 characters of ``[A-Za-z0-9._-]``, not ``.`` or ``..``) and a
    name that resolves out of ``directory`` (a symbolic link). Writes nothing."""
    for part in (*name_parts, suffix) if suffix else name_parts:
        if type(part) is not str or not NAME_PART_RE.fullmatch(part) or part in (".", ".."):
            raise InvalidArgument(
                f"state file name part {part!r}",
                "must be 1-128 characters of [A-Za-z0-9._-], not '.' or '..'",
            )
    name = "-".join(name_parts) + suffix
    if not name_parts or len(name) > NAME_MAX:
        raise InvalidArgument(f"state file name {name!r}", f"must be 1-{NAME_MAX} characters")
    path = Path(directory) / name
    if Path(os.path.realpath(path)).parent != Path(os.path.realpath(directory)):
        raise InvalidArgument(str(path), "leads out of its directory (a symbolic link)")
    return path


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
        raise StoreError(str(path), f"cannot write: {_reason(exc)}") from None


def open_private_append(path: Path, *, readable: bool = False) -> IO[str]:
    """Open ``path`` for appending (and reading with ``readable``), creating it 0600 and
    tightening a wider existing file; never through a symbolic link."""
    flags = (os.O_RDWR if readable else os.O_WRONLY) | os.O_APPEND | os.O_CREAT
    try:
        fd = _open(path, flags)
    except OSError as exc:
        raise StoreError(str(path), f"cannot open: {_reason(exc)}") from None
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
        raise StoreError(str(path), f"cannot use: {_reason(exc)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(str(path), "not a regular file (a symbolic link?); move it away")
    _tighten(path, st, FILE_MODE, "file", lambda mode: os.chmod(path, mode))


def _open(path: Path, flags: int) -> int:
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
            raise StoreError(str(path), f"cannot tighten to {mode:04o}: {_reason(exc)}") from None
        log.warning("%s %s was %04o; tightened to %04o", what, path, old, mode)


def read_state(path: Path) -> str | None:
    """The text of a state file, None when there is none (StoreError when unreadable or
    not UTF-8). Line ends are kept as they are ("\\r" is not turned into "\\n")."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise malformed(path, "not a text file") from None
    except OSError as exc:
        raise StoreError(str(path), f"cannot read: {_reason(exc)}") from None


def complete_lines(path: Path, text: str) -> list[str]:
    """The lines of an append-only file, split on "\\n" only (never on "\\r" or other
    separators). A last line without its "\\n" was torn by a crash as it was written, and
    is left out (logged)."""
    lines = text.split("\n")
    if torn := lines.pop():
        log.warning("%s: ignoring a last line torn by a crash: %.60r", path, torn)
    return lines


_path_locks: dict[Path, threading.Lock] = {}
_path_locks_guard = threading.Lock()
"""Guards ``_path_locks``: one lock per state file path, for the threads of this process."""


def _thread_lock(path: Path) -> threading.Lock:
    with _path_locks_guard:
        return _path_locks.setdefault(path, threading.Lock())


def malformed(path: Path, what: str) -> StoreError:
    """The one-line error for a state file that is not what it should be."""
    return StoreError(str(path), f"{what}; fix or remove it")


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symbolic link; refusing to follow it"
    return exc.strerror or str(exc)


class StateFile:
    """A JSON object on disk, 0600 in a 0700 directory (both made or tightened when the
    StateFile is made; ``path`` must be a plain name in its directory)."""

    def __init__(self, path: Path) -> None:
        self.path = state_path(path.parent, path.name)
        private_dir(self.path.parent)
        tighten_private(self.path)

    def load(self) -> dict[str, Any]:
        """The object (StoreError naming the file when it is not one)."""
        if (text := read_state(self.path)) is None:
            return {}
        try:
            data = json.loads(text)
        except ValueError:
            raise self.malformed("not a JSON state file") from None
        if not isinstance(data, dict):
            raise self.malformed("not a JSON object")
        return data

    def save(self, data: dict[str, Any]) -> None:
        private_dir(self.path.parent)
        write_private(self.path, json.dumps(data))

    def update(self, **changes: Any) -> dict[str, Any]:
        with self.locked():
            data = self.load()
            data.update(changes)
            self.save(data)
        return data

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the file for a read-modify-write: against the other threads of this
        process (a lock per path) and other processes (``flock`` on a ``.lock`` file
        beside it), so two writers of one file never lose each other's changes."""
        with _thread_lock(self.path):
            fd = _open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def malformed(self, what: str) -> StoreError:
        return malformed(self.path, what)

    def section(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        """``data[key]``, a JSON object ({} when absent or null)."""
        value = data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.malformed(f"{key!r} is not a JSON object")
        return value
