"""A daemon's users file, read again when it changes: ``users remove bob`` or a changed
grant takes effect on a running broker and name server, within ``CHECK_S``.

Until session 32 a daemon read the file once, at its start: a user removed from it kept
publishing and reading until the broker restarted. Now the file's identity (inode, size,
modification time) is looked at, at most once per ``CHECK_S``, by whichever call comes;
a file that changed is loaded again. One that cannot be read or is not valid (an editor
halfway through writing it) leaves the users as they were, with an error logged once per
change. Any thread may call :meth:`ReloadedUsers.current`: ``_lock`` guards the rest.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from channel_server.errors import InvalidArgument
from channel_server.users import UsersFile

log = logging.getLogger(__name__)
CHECK_S = 1.0
"""The longest a change to the users file goes unnoticed (while calls come)."""

Stamp = tuple[int, int, int] | None


def _stamp(path: Path) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class ReloadedUsers:
    """The users of ``path`` as last read well; ``generation`` counts the reads."""

    def __init__(
        self, path: Path, users: UsersFile, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._path = path
        self._users = users
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = _stamp(path)
        """The file as it was when last looked at (read well or not)."""
        self._checked_at = clock()
        self.generation = 0

    def current(self) -> UsersFile:
        """The users, read again first when the file changed (looked at once per CHECK_S)."""
        now = self._clock()
        if now - self._checked_at < CHECK_S:
            return self._users
        with self._lock:
            if now - self._checked_at >= CHECK_S:
                self._checked_at = now
                self._reload_if_changed()
            return self._users

    def _reload_if_changed(self) -> None:
        stamp = _stamp(self._path)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            users = UsersFile.load(self._path)
        except InvalidArgument as exc:
            log.error("users file not read again (the users stay as they were): %s", exc)
            return
        self._users = users
        self.generation += 1
        log.info("users file %s read again: %d users", self._path, len(users.names()))
