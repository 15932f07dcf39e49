"""Accepted sockets that wait, without a thread, in an accept loop's selector until their
first message is whole (a Pyro5 handshake: ``transport.LobbyServer``; an HTTP request
head: ``monitor.lobby.HeadLobby``).

They wait in accept order, and all wait at most the same time, so the first is the oldest
and has the nearest deadline: expiring them and making room are both a look at the
front. Only the accept loop's thread uses a room.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from channel_server.log_throttle import Throttle

log = logging.getLogger(__name__)
throttle = Throttle(log)
MIN_SELECT_S = 0.01


class Waiting(Protocol):
    """What a room keeps of a waiting socket (at least)."""

    address: Any
    deadline: float
    received: bytearray
    """What it sent so far."""


W = TypeVar("W", bound=Waiting)


class WaitingRoom(Generic[W]):
    """Sockets waiting in ``selector``, each with what its loop keeps of it (``W``)."""

    def __init__(self, selector: selectors.BaseSelector, what: str) -> None:
        self._selector = selector
        self._what = what
        """Who waits here, for the logs ("HTTP monitor", ...)."""
        self._waiting: dict[socket.socket, W] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def __iter__(self) -> Iterator[socket.socket]:
        return iter(list(self._waiting))

    def snapshot(self) -> dict[socket.socket, W]:
        """Who waits now, oldest first (a copy)."""
        return dict(self._waiting)

    def get(self, sock: socket.socket) -> W | None:
        """What waits for ``sock``; None once it is gone (dropped since the select)."""
        return self._waiting.get(sock)

    def accept(
        self,
        listener: socket.socket,
        make: Callable[[socket.socket, Any], W | None],
        max_waiting: int,
    ) -> None:
        """Accept a connection and let it wait with what ``make(sock, address)`` keeps of
        it (None: closed at once). Out of file descriptors, the oldest waiting socket
        makes room instead, and the client retries."""
        try:
            sock, address = listener.accept()
        except (BlockingIOError, TimeoutError):
            return
        except OSError as exc:
            throttle.warning("accept", "%s cannot accept a connection: %s", self._what, exc)
            self.drop_oldest()
            return
        waiting = make(sock, address)
        if waiting is None:
            sock.close()
            return
        self.add(sock, waiting, max_waiting)

    def add(self, sock: socket.socket, waiting: W, max_waiting: int) -> None:
        """Let ``sock`` wait (non-blocking), the oldest closed first when ``max_waiting``
        wait already."""
        if len(self._waiting) >= max_waiting:
            self.drop_oldest()
        sock.setblocking(False)
        self._waiting[sock] = waiting
        self._selector.register(sock, selectors.EVENT_READ)

    def read(
        self,
        sock: socket.socket,
        waiting: W,
        limit: int,
        recv: Callable[[socket.socket, int], bytes],
    ) -> bool:
        """Read what ``sock`` has (up to ``limit`` bytes, with ``recv``) onto what it sent
        so far; False when nothing came (it would block), or the peer closed (dropped)."""
        try:
            chunk = recv(sock, limit)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self.drop(sock)
            return False
        waiting.received += chunk
        return True

    def to_back(self, sock: socket.socket, waiting: W) -> None:
        """Put ``sock`` at the back of the deadline order (its deadline moved later)."""
        del self._waiting[sock]
        self._waiting[sock] = waiting

    def timeout(self, poll_s: float) -> float:
        """How long the loop may wait for events: until the oldest socket's deadline."""
        if not self._waiting:
            return poll_s
        oldest = next(iter(self._waiting.values()))
        return max(MIN_SELECT_S, min(poll_s, oldest.deadline - time.monotonic()))

    def expire(self, now: float) -> None:
        """Close the sockets whose deadline passed."""
        while self._waiting:
            sock, waiting = next(iter(self._waiting.items()))
            if waiting.deadline > now:
                return
            log.debug("%s: %s sent nothing whole in time: closed", self._what, waiting.address)
            self.drop(sock)

    def drop_oldest(self) -> None:
        if self._waiting:
            sock, waiting = next(iter(self._waiting.items()))
            throttle.warning(
                "full",
                "%s: too many connections waiting: closed the oldest, from %s",
                self._what,
                waiting.address,
            )
            self.drop(sock)

    def lost(self, fileobj: Any, exc: Exception) -> None:
        """An error the loop's handling did not expect (a bug; no thread to spare): logged
        with its trace, and the connection it came from closed. The loop goes on: ended by
        one connection, it would leave its daemon deaf for good while the process lives."""
        throttle.error(
            "lost",
            "%s: closed a connection that failed in the accept loop: %s: %s",
            self._what,
            type(exc).__name__,
            exc,
            exc_info=True,
        )
        if fileobj in self._waiting:
            self.drop(fileobj)

    def drop(self, sock: socket.socket) -> None:
        self.forget(sock)
        with contextlib.suppress(OSError):
            sock.close()

    def forget(self, sock: socket.socket) -> None:
        """Stop watching ``sock`` (it goes on elsewhere, or it is closed)."""
        if self._waiting.pop(sock, None) is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(sock)

    def drop_all(self) -> None:
        for sock in list(self._waiting):
            self.drop(sock)


class Waker:
    """What ends an accept loop's wait at once: a socket pair, its reading end in the
    loop's selector; a wake-up never blocks (one byte is enough)."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        selector.register(self._r, selectors.EVENT_READ)

    def owns(self, fileobj: Any) -> bool:
        return fileobj is self._r

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            self._w.send(b"!")

    def drain(self) -> None:
        """Read the wake-ups (the loop woke)."""
        with contextlib.suppress(OSError):
            while self._r.recv(4096):
                pass

    def close(self) -> None:
        self._r.close()
        self._w.close()


def recv_ready(sock: socket.socket, limit: int) -> bytes:
    """What a lobby socket has ready, up to ``limit`` bytes: a TLS socket may hold
    decrypted bytes that no readiness event will announce, so they are taken too."""
    data = sock.recv(limit)
    while data and len(data) < limit and isinstance(sock, ssl.SSLSocket) and sock.pending():
        data += sock.recv(min(limit - len(data), sock.pending()))
    return data
