"""How many of a daemon's connections each user holds, and the bound on it.

A daemon serves ``--max-connections`` connections at once, one worker thread each. Without
a share per user, one logged-in user (a users-file account, a leaky client of it) could
hold them all and lock every other user out, the owner included: the lobby turns a
connection away for want of a worker before it knows who is asking. So a user of the
users file may hold at most ``--max-connections-per-user`` of them (half of
``--max-connections`` unless set); one more is refused at its handshake with
:class:`~channel_server.errors.LimitReached`. The owner is not counted: it runs the broker.
And the users together hold at most seven eighths of them, so that two users at their
shares cannot lock the owner out either (session 32).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, NoReturn

from channel_server.credentials import OWNER
from channel_server.errors import LimitReached
from channel_server.log_throttle import Throttle

log = logging.getLogger(__name__)
USER_ATTRIBUTE = "pubsub_user"
"""The attribute of a Pyro5 connection that holds its authenticated user (set by
:meth:`~channel_server.access.Access.admit`)."""
SHARE_ATTRIBUTE = "pubsub_share"
"""The attribute of a connection counted in a user's share: the user's name."""


class ConnectionShares:
    """The connections of one daemon, counted per user. Any worker thread may call it:
    ``_lock`` guards ``_held``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        """User name -> connections it holds (only users holding any)."""
        self._total = 0
        """The sum of ``_held``."""
        self._refusals = Throttle(log)

    def take(self, conn: Any, limit: int, users_limit: int) -> None:
        """Count an admitted connection against its user's share, or refuse it
        (LimitReached) when the user holds ``limit`` already, or all users together
        ``users_limit``. A connection without a user (a callback daemon's caller) or of
        the owner is not counted."""
        user = getattr(conn, USER_ATTRIBUTE, None)
        if user is None or user.name == OWNER:
            return
        name = user.name
        with self._lock:
            held = self._held.get(name, 0)
            if held >= limit:
                self._refuse(
                    "share",
                    f"user {name} holds {limit} connections: refused one more (see "
                    "--max-connections-per-user)",
                    LimitReached("connections", limit, f"user {name}"),
                )
            if self._total >= users_limit:
                self._refuse(
                    "users",
                    f"users hold {users_limit} connections together, the most they may (an "
                    f"eighth of --max-connections is the owner's): refused one more of user {name}",
                    LimitReached("connections of users", users_limit, "this daemon"),
                )
            self._held[name] = held + 1
            self._total += 1
        setattr(conn, SHARE_ATTRIBUTE, name)

    def release(self, conn: Any) -> None:
        """The connection closed: its user holds one fewer (once; an uncounted one: no
        change)."""
        name = getattr(conn, SHARE_ATTRIBUTE, None)
        if name is None:
            return
        delattr(conn, SHARE_ATTRIBUTE)
        with self._lock:
            self._total -= 1
            left = self._held[name] - 1
            if left:
                self._held[name] = left
            else:
                del self._held[name]

    def held(self, name: str) -> int:
        with self._lock:
            return self._held.get(name, 0)

    def _refuse(self, kind: str, message: str, error: LimitReached) -> NoReturn:
        self._refusals.warning(kind, "%s", message)
        raise error
