"""The HTTP monitor's accept loop: a connection gets a request thread only once its whole
request head has arrived.

``ThreadingHTTPServer`` gives each accepted socket a thread before it has sent a byte, so
as many silent sockets as the monitor serves at once (16) locked every scraper and page
out, each for the request timeout, over and over. Here an accepted socket waits in a
*lobby* (one selector in the accept loop, no thread) until its head (up to the blank line)
is here, within the request timeout; the oldest waiting socket makes room when
``max_waiting`` are waiting. What was read is handed on with the socket (:class:`Arrival`).
A TLS socket's handshake is also taken step by step here, so a client that trickles it
holds no thread either.

Threads: :meth:`HeadLobby.run` is the accept loop's thread, which alone touches the
waiting sockets; :meth:`HeadLobby.stop` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from channel_server.log_throttle import Throttle
from channel_server.transport import recv_ready

log = logging.getLogger(__name__)
throttle = Throttle(log)
HEAD_END = b"\r\n\r\n"
MIN_SELECT_S = 0.01


@dataclass
class Arrival:
    """A connection whose request head has arrived (or that sent more than a head may
    hold, to be refused by its request thread)."""

    address: Any
    deadline: float
    """When the whole request must have been read (monotonic)."""
    received: bytearray = field(default_factory=bytearray)
    handshaken: bool = False
    """A TLS socket's handshake is done (a plain socket has none)."""


@dataclass(frozen=True)
class LobbyLimits:
    max_waiting: int
    """Sockets waiting for their head at once; the oldest is closed to make room."""
    timeout_s: float
    """From accept to a whole request."""
    head_bytes: int
    """A head not ended within this many bytes goes on to be refused (431)."""


class HeadLobby:
    """Accepts on ``listener`` and calls ``hand_over(sock, arrival)`` (in this loop's
    thread) once a connection's head is here."""

    def __init__(
        self,
        listener: socket.socket,
        limits: LobbyLimits,
        hand_over: Callable[[socket.socket, Arrival], None],
        poll_s: float,
    ) -> None:
        self._listener, self._limits, self._hand_over = listener, limits, hand_over
        self._poll_s = poll_s
        self._waiting: dict[socket.socket, Arrival] = {}
        """In accept order, so the first is the oldest (deadlines share one timeout)."""
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = threading.Event()
        self._selector.register(listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)

    def run(self) -> None:
        """Serve until :meth:`stop`; then close the waiting sockets and the wake pair."""
        try:
            while not self._stopping.is_set():
                for key, _ in self._selector.select(self._select_timeout()):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is not self._wake_r:
                        self._read(key.fileobj)  # type: ignore[arg-type]
                self._expire(time.monotonic())
        finally:
            for sock in list(self._waiting):
                self._drop(sock)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"!")

    def _select_timeout(self) -> float:
        if not self._waiting:
            return self._poll_s
        oldest = next(iter(self._waiting.values()))
        return max(MIN_SELECT_S, min(self._poll_s, oldest.deadline - time.monotonic()))

    def _accept(self) -> None:
        try:
            sock, address = self._listener.accept()
        except (BlockingIOError, TimeoutError):
            return
        except OSError as exc:  # out of file descriptors: make room, the client retries
            throttle.warning("accept", "HTTP monitor cannot accept a connection: %s", exc)
            self._evict_oldest()
            return
        if len(self._waiting) >= self._limits.max_waiting:
            self._evict_oldest()
        sock.setblocking(False)
        deadline = time.monotonic() + self._limits.timeout_s
        self._waiting[sock] = Arrival(address, deadline, handshaken=not _is_tls(sock))
        self._selector.register(sock, selectors.EVENT_READ)

    def _read(self, sock: socket.socket) -> None:
        arrival = self._waiting.get(sock)
        if arrival is None:  # evicted by an accept of the same round
            return
        if not arrival.handshaken and not self._handshake_step(sock, arrival):
            return
        try:
            chunk = recv_ready(sock, self._limits.head_bytes - len(arrival.received))
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(sock)
            return
        arrival.received += chunk
        if HEAD_END in arrival.received or len(arrival.received) >= self._limits.head_bytes:
            self._forget(sock)
            self._hand_over(sock, arrival)

    def _handshake_step(self, sock: Any, arrival: Arrival) -> bool:
        """Take a TLS handshake a step further; True once it is done."""
        try:
            sock.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except (ssl.SSLError, OSError) as exc:
            throttle.warning(
                "tls", "HTTP monitor: TLS refused a connection from %s: %s", arrival.address[0], exc
            )
            self._drop(sock)
            return False
        arrival.handshaken = True
        return True

    def _expire(self, now: float) -> None:
        while self._waiting:
            sock, arrival = next(iter(self._waiting.items()))
            if arrival.deadline > now:
                return
            log.debug("HTTP client %s sent no request in time: closed", arrival.address[0])
            self._drop(sock)

    def _evict_oldest(self) -> None:
        if self._waiting:
            sock, arrival = next(iter(self._waiting.items()))
            throttle.warning(
                "full",
                "HTTP monitor: %d connections waiting for their request: closed the oldest, "
                "from %s",
                self._limits.max_waiting,
                arrival.address[0],
            )
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        self._forget(sock)
        with contextlib.suppress(OSError):
            sock.close()

    def _forget(self, sock: socket.socket) -> None:
        if self._waiting.pop(sock, None) is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(sock)


def _is_tls(sock: socket.socket) -> bool:
    return isinstance(sock, ssl.SSLSocket)
