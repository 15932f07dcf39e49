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
from channel_server.waiting_room import WaitingRoom, Waker, recv_ready

log = logging.getLogger(__name__)
throttle = Throttle(log)
HEAD_END = b"\r\n\r\n"


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
        self._selector = selectors.DefaultSelector()
        self._room: WaitingRoom[Arrival] = WaitingRoom(self._selector, "HTTP monitor")
        self._waker = Waker(self._selector)
        self._stopping = threading.Event()
        self._selector.register(listener, selectors.EVENT_READ)

    def run(self) -> None:
        """Serve until :meth:`stop`; then close the waiting sockets and the wake pair."""
        try:
            while not self._stopping.is_set():
                for key, _ in self._selector.select(self._room.timeout(self._poll_s)):
                    try:
                        if key.fileobj is self._listener:
                            self._accept()
                        elif not self._waker.owns(key.fileobj):
                            self._read(key.fileobj)  # type: ignore[arg-type]
                    except Exception as exc:  # (a request thread that would not start)
                        self._room.lost(key.fileobj, exc)
                self._room.expire(time.monotonic())
        finally:
            self._room.drop_all()
            self._selector.close()
            self._waker.close()

    def stop(self) -> None:
        self._stopping.set()
        self._waker.wake()

    def _accept(self) -> None:
        self._room.accept(self._listener, self._arrival, self._limits.max_waiting)

    def _arrival(self, sock: socket.socket, address: Any) -> Arrival:
        deadline = time.monotonic() + self._limits.timeout_s
        return Arrival(address, deadline, handshaken=not _is_tls(sock))

    def _read(self, sock: socket.socket) -> None:
        arrival = self._room.get(sock)
        if arrival is None:  # evicted by an accept of the same round
            return
        if not arrival.handshaken and not self._handshake_step(sock, arrival):
            return
        limit = self._limits.head_bytes - len(arrival.received)
        if not self._room.read(sock, arrival, limit, recv_ready):
            return
        if HEAD_END in arrival.received or len(arrival.received) >= self._limits.head_bytes:
            self._room.forget(sock)
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
            self._room.drop(sock)
            return False
        arrival.handshaken = True
        return True


def _is_tls(sock: socket.socket) -> bool:
    return isinstance(sock, ssl.SSLSocket)
