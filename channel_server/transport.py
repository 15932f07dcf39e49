"""The connections a daemon serves: bounded, timed, and well-formed frames only (issue 13).

Pyro5's thread-pool server gives each accepted socket a worker thread before it has sent a
byte, and when every worker is taken it answers in its accept loop with a blocking read, so
a few hundred idle sockets locked every client out. Here an accepted socket waits in a
*lobby* (one selector in the accept loop, no thread) until its whole handshake has arrived,
within ``handshake_timeout_s``, and only then gets a worker; the oldest waiting socket makes
room when ``max_waiting`` are waiting. (A TLS socket moves on at its first bytes: its
handshake needs the TLS layer first; the worker then gives it ``handshake_timeout_s``.)

Each frame's header is checked before its body is read (:mod:`channel_server.frames`). An
established connection idle for ``comm_timeout_s`` is closed;
clients see that (``wire.closed_by_peer``) and reconnect before their next call.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import resource
import socket
import ssl
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, cast

import Pyro5
import Pyro5.core
import Pyro5.errors
import Pyro5.svr_threads
from Pyro5 import protocol, serializers

from channel_server import after_reply, strict_calls
from channel_server.connection_shares import ConnectionShares
from channel_server.errors import ChannelError, InvalidArgument
from channel_server.frames import (
    HANDSHAKE_KINDS,
    HANDSHAKE_MAX_BYTES,
    HEADER_BYTES,
    MSGPACK_ID,
    PYRO_TAG,
    CheckedConnection,
    Frame,
    FrameRefused,
    read_header,
)
from channel_server.log_throttle import Throttle
from channel_server.proofs import PROOF_TARGET, Target
from channel_server.tls_sockets import plain_refusal
from channel_server.waiting_room import WaitingRoom, Waker, recv_ready
from channel_server.wire import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)


OWNER_SHARE = 8
"""An eighth of a daemon's connections (at least one) is kept for its owner."""


@dataclass(frozen=True)
class TransportConfig:
    """How many connections a process serves and for how long (every daemon here)."""

    max_connections: int = 256
    """Connections served at once (Pyro5 worker threads); one more is refused as busy."""
    comm_timeout_s: float = 60.0
    """An established connection that sends nothing for this long is closed."""
    handshake_timeout_s: float = 5.0
    """A new connection must have sent its whole handshake within this."""
    max_message_bytes: int = MAX_MESSAGE_BYTES
    """Largest frame accepted; its header is refused before the body is read."""
    max_waiting: int = 1024
    """Connections waiting for their handshake (a file descriptor each, no thread)."""
    max_connections_per_user: int | None = None
    """Connections one user of a users file may hold at once on a daemon that knows its
    callers' users (the broker, the name server); None: half of ``max_connections``
    (see :mod:`~channel_server.connection_shares`)."""

    @property
    def per_user_limit(self) -> int:
        if self.max_connections_per_user is not None:
            return self.max_connections_per_user
        return max(1, self.max_connections // 2)

    @property
    def users_limit(self) -> int:
        """Connections the users of a users file may hold together: the rest are the
        owner's (its CLI and its brokers), so two users cannot lock it out."""
        return max(1, self.max_connections - max(1, self.max_connections // OWNER_SHARE))

    def fitted(self, open_files: int) -> TransportConfig:
        """These bounds within ``open_files`` file descriptors, FILES_RESERVED kept for the
        process's own (its store, its pushes): fewer connections wait for a handshake if
        need be. Else strangers opening sockets could take the last descriptors, and the
        store could no longer write."""
        room = max(1, open_files - FILES_RESERVED - self.max_connections)
        return self if self.max_waiting <= room else replace(self, max_waiting=room)

    def apply(self) -> None:
        """Make this process's daemons (and Pyro5's own checks) use these bounds, within
        the descriptors it may open (raised to the hard limit first)."""
        fitted = self.fitted(raise_open_files(self.max_waiting + self.max_connections))
        if fitted is not self:
            log.warning(
                "at most %d connections wait for their handshake (not %d): this process may "
                "open %d files (ulimit -n), %d of them kept for its own",
                fitted.max_waiting,
                self.max_waiting,
                fitted.max_waiting + self.max_connections + FILES_RESERVED,
                FILES_RESERVED,
            )
        Pyro5.config.THREADPOOL_SIZE = fitted.max_connections
        Pyro5.config.THREADPOOL_SIZE_MIN = min(
            Pyro5.config.THREADPOOL_SIZE_MIN, fitted.max_connections
        )
        Pyro5.config.COMMTIMEOUT = fitted.comm_timeout_s
        Pyro5.config.POLLTIMEOUT = IDLE_POLL_S
        Pyro5.config.MAX_MESSAGE_SIZE = fitted.max_message_bytes
        global _config
        _config = fitted
        install()


FILES_RESERVED = 512
"""File descriptors no caller's connection may take: the store's files and journal, the
broker's connections to its subscribers, logs."""


def raise_open_files(connections: int) -> int:
    """How many files this process may open, after raising its soft limit (up to the hard
    one) to hold ``connections`` and FILES_RESERVED more."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + FILES_RESERVED
    if soft != resource.RLIM_INFINITY and soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return wanted if soft == resource.RLIM_INFINITY else soft


IDLE_POLL_S = 30.0
"""How often a daemon's accept loop and Pyro5's housekeeper wake with nothing to do (Pyro5's
``POLLTIMEOUT``, 2 s by default). A connection, a handshake's deadline and a stop each
wake them (the stop through the loop's own socket pair, :meth:`LobbyServer.wakeup`), so
waking more often only costs an idle process CPU: about 0.2 ms a second for the two,
which 256 subscribers pay 256 times."""

_config: TransportConfig | None = None


def current() -> TransportConfig:
    """The bounds in force (the defaults until a process applies its own)."""
    if _config is None:
        TransportConfig().apply()
    assert _config is not None
    return _config


def install() -> None:
    """Serve every daemon created from now on through :class:`LobbyServer` (idempotent)."""
    strict_calls.install()
    Pyro5.svr_threads.SocketServer_Threadpool = LobbyServer


throttle = Throttle(log)
"""Refusals of the transport (frames, connections), each kind at most once per 10 s."""


class _Job:
    """One served connection on a worker thread: handshake, then calls until it closes."""

    def __init__(self, conn: CheckedConnection, address: Any, daemon: Any) -> None:
        self.conn, self.address, self.daemon = conn, address, daemon

    def __call__(self) -> None:
        try:
            self._serve()
        except FrameRefused as exc:
            throttle.warning("frame", "refused a frame from %s: %s", _host(self.address), exc)
            self.daemon.refuse_frame(self.conn, exc)
        except Pyro5.errors.TimeoutError:
            log.debug("closed the idle connection from %s", _host(self.address))
        except (OSError, Pyro5.errors.CommunicationError) as exc:
            log.debug("connection from %s ends: %s", _host(self.address), exc)
        except Exception as exc:  # a worker must not die on one connection's trouble
            throttle.warning("error", "connection from %s failed: %r", _host(self.address), exc)
        finally:
            self.conn.close()
            ended = getattr(self.daemon, "connection_ended", None)  # a plain Pyro5 daemon: none
            if ended is not None:
                ended(self.conn)

    def _serve(self) -> None:
        if not self.daemon._handshake(self.conn):
            return
        self.conn.handshaken = True
        self.conn.timeout = current().comm_timeout_s or None
        try:
            while True:
                self.daemon.handleRequest(self.conn)
        finally:
            self.daemon._clientDisconnect(self.conn)


@dataclass
class _Waiting:
    address: Any
    deadline: float
    received: bytearray
    draining: bool = False
    """Refused: what the peer still sends is read and dropped until it closes or the
    deadline, so what we sent it last (a TLS alert) is not lost to a reset."""
    plain: bool = False
    """A plain Pyro client of a TLS daemon whose handshake came in pieces: its bytes are
    read here, under the TLS layer, until it is whole and refused (``_tls_ready``)."""


DRAIN_S = 0.2
LOOP_END_WAIT_S = 5.0
"""How long a closing server waits for its accept loop to end before closing the sockets
the loop selects on."""


class LobbyServer(Pyro5.svr_threads.SocketServer_Threadpool):
    """Pyro5's thread-pool transport with a lobby for connections still handshaking."""

    def __init__(self) -> None:
        super().__init__()
        self._room: WaitingRoom[_Waiting] = WaitingRoom(self._selector, "daemon")
        self._waker = Waker(self._selector)
        """What ends the loop's wait at once (:meth:`wakeup`)."""
        self._loop_thread: threading.Thread | None = None
        self._loop_ended = threading.Event()

    def loop(self, loopCondition: Any = lambda: True) -> None:
        self._loop_thread = threading.current_thread()
        try:
            super().loop(loopCondition)
        finally:
            self._loop_ended.set()

    def events(self, eventsockets: Any) -> None:
        for key, _ in self._selector.select(self._room.timeout(Pyro5.config.POLLTIMEOUT)):
            try:
                if key.fileobj is self.sock:
                    self._accept()
                elif self._waker.owns(key.fileobj):
                    self._waker.drain()
                else:
                    self._read(cast(socket.socket, key.fileobj))
            except Exception as exc:  # Pyro5's loop ends on anything but an OSError
                self._room.lost(key.fileobj, exc)
        self._room.expire(time.monotonic())

    def wakeup(self) -> None:
        """End the loop's wait at once. (Pyro5 connects to the daemon's own port for it,
        which a listening socket closed or with a full backlog does not let through.)"""
        self._waker.wake()

    def _accept(self) -> None:
        self._room.accept(self.sock, self._waiting, current().max_waiting)

    def _waiting(self, sock: socket.socket, address: Any) -> _Waiting | None:
        if self.shutting_down:
            return None
        deadline = time.monotonic() + current().handshake_timeout_s
        return _Waiting(address, deadline, bytearray())

    def _read(self, sock: socket.socket) -> None:
        waiting = self._room.get(sock)
        if waiting is None:  # dropped since the select: evicted by an accept of the same
            return  # round, or closed by a shutdown (the loop thread must not die of it)
        if waiting.draining:
            if _read_what_is_there(sock):
                self._room.drop(sock)
            return
        pending = getattr(sock, "handshake_pending", False) and not waiting.plain
        if pending and not self._tls_ready(sock, waiting):
            return
        limit = HEADER_BYTES + HANDSHAKE_MAX_BYTES - len(waiting.received)
        recv = socket.socket.recv if waiting.plain else recv_ready
        if not self._room.read(sock, waiting, limit, recv):
            return
        if not PYRO_TAG.startswith(bytes(waiting.received[: len(PYRO_TAG)])):
            # Not Pyro5 from the first bytes: no reason to wait for a whole header.
            throttle.warning(
                "handshake", "refused a connection from %s: not Pyro5", _host(waiting.address)
            )
            self._room.drop(sock)
            return
        if len(waiting.received) < HEADER_BYTES:
            return
        try:
            frame = read_header(
                bytes(waiting.received[:HEADER_BYTES]), HANDSHAKE_KINDS, HANDSHAKE_MAX_BYTES
            )
        except FrameRefused as exc:
            throttle.warning(
                "handshake", "refused a connection from %s: %s", _host(waiting.address), exc
            )
            self._refuse(sock, None if waiting.plain else exc.frame, exc.reason)
            return
        if len(waiting.received) < HEADER_BYTES + frame.size:
            return
        if waiting.plain:
            throttle.warning(
                "plain",
                "refused a plain-text connection from %s: TLS is required",
                _host(waiting.address),
            )
            self._refuse(sock, frame, plain_refusal(), plain=True)
        else:
            self._hand_over(sock, waiting, frame)

    def _tls_ready(self, sock: Any, waiting: _Waiting) -> bool:
        """Take a TLS connection's handshake a step further, here in the lobby, so a
        client that trickles it holds no worker thread; True once it is done. A client
        speaking plain Pyro goes to a worker once its whole message is here, to be told
        that TLS is required (``tls_sockets``); one whose message comes in pieces is read
        here (``plain``: bytes only peeked at would keep the socket readable, and this loop
        spinning, until the rest came), and refused here once it is whole."""
        try:
            head = socket.socket.recv(sock, HEADER_BYTES + HANDSHAKE_MAX_BYTES, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        except OSError:
            head = b""
        if not head:
            self._room.drop(sock)
            return False
        if PYRO_TAG.startswith(head[: len(PYRO_TAG)]):
            whole = _whole_plain_frame(head)
            if whole:
                self._hand_over(sock, waiting)
            elif whole is None:
                self._room.drop(sock)
            else:  # no TLS handshake starts so: read on as plain Pyro
                waiting.plain = True
                return True
            return False
        try:
            done = sock.handshake_step()
        except (ssl.SSLError, OSError) as exc:
            throttle.warning(
                "tls", "TLS refused a connection from %s: %s", _host(waiting.address), exc
            )
            self._drain(sock, waiting)  # so the alert saying why reaches the client
            return False
        return done

    def _hand_over(
        self, sock: socket.socket, waiting: _Waiting, frame: Frame | None = None
    ) -> None:
        self._room.forget(sock)
        limits = current()
        sock.settimeout(limits.handshake_timeout_s)
        conn = CheckedConnection(sock, bytes(waiting.received), limits.max_message_bytes)
        try:
            self.pool.process(_Job(conn, waiting.address, self.daemon))
        except Pyro5.svr_threads.NoFreeWorkersError:
            throttle.warning(
                "busy",
                "all %d connections are in use: refused one from %s (see --max-connections)",
                limits.max_connections,
                _host(waiting.address),
            )
            busy = f"busy: all {limits.max_connections} connections are in use, retry later"
            self._refuse(sock, frame, busy)
        except RuntimeError as exc:  # "can't start new thread": out of memory or threads
            throttle.error(
                "thread", "no thread for a connection from %s: %s", _host(waiting.address), exc
            )
            self._refuse(sock, frame, "busy: no thread could be started for it, retry later")

    def _refuse(
        self, sock: socket.socket, frame: Frame | None, reason: str, plain: bool = False
    ) -> None:
        """Answer a handshake with its refusal if it can be sent at once, then close
        (``plain``: in plain Pyro, under the TLS layer of a socket that never used it)."""
        self._room.forget(sock)
        if frame is not None and (plain or not isinstance(sock, ssl.SSLSocket)):
            serializer = serializers.serializers_by_id.get(frame.serializer)
            serializer = serializer or serializers.serializers_by_id[MSGPACK_ID]
            reply = protocol.SendingMessage(
                protocol.MSG_CONNECTFAIL,
                0,
                frame.seq,
                serializer.serializer_id,
                serializer.dumps(reason),
            )
            with contextlib.suppress(OSError):
                sock.setblocking(False)
                socket.socket.send(sock, reply.data)
        _close(sock)

    def _drain(self, sock: socket.socket, waiting: _Waiting) -> None:
        if _read_what_is_there(sock):
            self._room.drop(sock)
            return
        waiting.draining, waiting.deadline = True, time.monotonic() + DRAIN_S
        self._room.to_back(sock, waiting)

    def shutdown(self) -> None:
        """:meth:`close` wakes the loop and waits for its end itself (Pyro5's shutdown woke
        it, slept 50 ms, then closed)."""
        self.close()

    def close(self) -> None:
        """End the loop, then close its sockets. Pyro5 closed them 50 ms after waking the
        loop: a loop thread that had not run by then (a loaded machine) lost the listening
        socket from its selector, and waited out its whole poll."""
        self.shutting_down = True
        loop = self._loop_thread
        if loop is not None and loop is not threading.current_thread():
            self.wakeup()
            if not self._loop_ended.wait(LOOP_END_WAIT_S):
                log.warning("the accept loop did not end within %g s", LOOP_END_WAIT_S)
        self._room.drop_all()
        super().close()
        self._waker.close()


def proof_target(sock: socket.socket, since: float) -> Target:
    """What a caller on ``sock`` must have made its proof for: this daemon's port and, from
    this machine (a loopback peer: one clock), no earlier than ``since``."""
    port = sock.getsockname()[1]
    try:
        peer = ipaddress.ip_address(sock.getpeername()[0].split("%")[0])
    except (OSError, ValueError):
        return Target(port)
    mapped = peer.ipv4_mapped if isinstance(peer, ipaddress.IPv6Address) else None
    return Target(port, since if (mapped or peer).is_loopback else None)


class HardenedDaemon:
    """Mixin placed before a Pyro5 daemon class: the lobby transport, strict calls, and a
    ``Pyro.Daemon`` object with typed refusals."""

    objectsById: dict[str, Any]  # the Pyro5 daemon's, set by its __init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        current()
        install()
        self.listening_since = time.monotonic()
        """Taken before the bind (the machine's monotonic clock, as proofs carry it): a
        proof made by a caller on this machine once it could connect is later."""
        super().__init__(*args, **kwargs)
        self.objectsById[Pyro5.core.DAEMON_NAME] = strict_calls.StrictDaemonObject(self)
        self.shares = ConnectionShares()

    def validateHandshake(self, conn: Any, data: Any) -> Any:
        """Pyro5's handshake hook: the daemon's gate (:meth:`admit`), then the admitted
        connection counted against its user's share (LimitReached past it). The gate
        finds what a proof must be made for on the connection (:func:`proof_target`)."""
        setattr(conn, PROOF_TARGET, proof_target(conn.sock, self.listening_since))
        answer = self.admit(conn, data)
        limits = current()
        self.shares.take(conn, limits.per_user_limit, limits.users_limit)
        return answer

    def admit(self, conn: Any, data: Any) -> Any:
        """Who may connect, and the handshake's answer (a daemon with a gate overrides
        it; Pyro5's default admits anyone)."""
        return super().validateHandshake(conn, data)  # type: ignore[misc]

    def connection_ended(self, conn: Any) -> None:
        """A served connection closed, however it ended: its user holds one fewer."""
        self.shares.release(conn)

    def handleRequest(self, conn: Any) -> None:
        strict_calls.serving(self)
        with after_reply.serving():  # what the call defers runs once its reply is sent
            super().handleRequest(conn)  # type: ignore[misc]

    def _sendExceptionResponse(
        self,
        connection: Any,
        seq: int,
        serializer_id: int,
        exc_value: BaseException,
        tbinfo: Any,
        flags: int = 0,
        annotations: Any = None,
    ) -> None:
        """A caller learns what went wrong, never where: Pyro5 would send the server's
        traceback (its files, lines and code) with every error. A typed error says all a
        caller needs, as does a name server's NamingError (a name not registered yet, say,
        while a broker restarts); any other one is a bug, whose traceback is logged here."""
        if tbinfo and not isinstance(exc_value, ChannelError | Pyro5.errors.NamingError):
            throttle.error("traceback", "a call failed: %s", "".join(tbinfo).rstrip())
        super()._sendExceptionResponse(  # type: ignore[misc]
            connection, seq, serializer_id, exc_value, None, flags, annotations
        )

    def refuse_frame(self, conn: Any, exc: FrameRefused) -> None:
        """Tell a msgpack caller why its frame was refused (it may not be listening)."""
        frame = exc.frame
        if frame is None or frame.kind != protocol.MSG_INVOKE or frame.serializer != MSGPACK_ID:
            return
        error = InvalidArgument("message", exc.reason)
        with contextlib.suppress(Exception):
            self._sendExceptionResponse(conn, frame.seq, MSGPACK_ID, error, None)


def bind_failure(exc: OSError, what: str, host: str, port: int) -> OSError:
    """``exc`` saying which address could not be bound ("Address already in use" alone
    names no port)."""
    where = f"{what} at {host}:{port}" if port else f"{what} on {host}"
    return OSError(exc.errno, f"{where}: {exc.strerror or exc}")


def _read_what_is_there(sock: socket.socket) -> bool:
    """Read and drop what the peer sent, without waiting (closing a socket with unread
    bytes resets the connection, and the peer may lose what was sent last); True when
    the peer closed."""
    try:
        while socket.socket.recv(sock, 65536, socket.MSG_DONTWAIT):
            pass
    except BlockingIOError:
        return False
    except OSError:
        pass
    return True


def _whole_plain_frame(head: bytes) -> bool | None:
    """Whether ``head`` holds a whole plain Pyro handshake frame; None when its header
    is one no daemon here would read (then nobody waits for its body)."""
    if len(head) < HEADER_BYTES:
        return False
    try:
        frame = read_header(head[:HEADER_BYTES], HANDSHAKE_KINDS, HANDSHAKE_MAX_BYTES)
    except FrameRefused:
        return None
    return len(head) >= HEADER_BYTES + frame.size


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def _host(address: Any) -> str:
    try:
        return f"{address[0]}:{address[1]}"
    except (TypeError, IndexError):
        return str(address)
