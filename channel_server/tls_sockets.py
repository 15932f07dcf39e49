"""The sockets of Pyro5's SSL contexts in this process (``tls`` installs them): a daemon's
TLS handshake taken a non-blocking step at a time by the transport's lobby (no worker
thread waits on it), a plain-Pyro client told in plain Pyro that TLS is required, and a
client's TLS failure reported as a refusal when its meaning is plain (no retries, a reason
that says what to fix)."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from typing import Any, cast

from Pyro5 import protocol, serializers

from channel_server.errors import REFUSED_MARK as REFUSED
from channel_server.errors import NotAuthorized

log = logging.getLogger("channel_server.tls")


class PyroTlsSocket(ssl.SSLSocket):
    """The sockets of Pyro5's SSL contexts in this process (see :func:`_install`).

    A daemon's ``accept`` leaves the TLS handshake to the lobby
    (:meth:`handshake_step`, until ``handshake_pending`` is false); a server without a
    lobby gets it done by the first read, on the connection's worker thread. A client that
    speaks plain Pyro there is answered in plain Pyro that TLS is required. On a client,
    a peer that TLS refuses, or that refuses this process, fails as a refusal
    (``wire.REFUSED``): no retries, a clear reason."""

    _handshake_pending = False
    """True on a daemon's accepted connection until its first read."""

    def accept(self) -> tuple[ssl.SSLSocket, Any]:
        sock, address = socket.socket.accept(self)
        tls_sock = cast(
            PyroTlsSocket,  # the context's sslsocket_class
            self.context.wrap_socket(
                sock,
                server_side=True,
                do_handshake_on_connect=False,
                suppress_ragged_eofs=getattr(self, "suppress_ragged_eofs", True),
            ),
        )
        tls_sock._handshake_pending = True
        return tls_sock, address

    @property
    def handshake_pending(self) -> bool:
        return self._handshake_pending

    def handshake_step(self) -> bool:
        """One non-blocking step of a daemon's TLS handshake; True once it is done.
        Raises ssl.SSLError (or OSError) when TLS refuses the peer."""
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        self._handshake_pending = False
        return True

    def do_handshake(self, block: bool = False) -> None:
        try:
            super().do_handshake(block)
        except ssl.SSLError as exc:
            raise self._refusal(exc) from exc

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        if self._handshake_pending:
            self._handshake_pending = False
            _refuse_plain_pyro(self)
            try:
                super().do_handshake()
            except ssl.SSLError as exc:
                log.warning("TLS refused a connection from %s: %s", _peer(self), exc.reason)
                _drain(self)  # so our alert reaches the client rather than a reset
                raise
        try:
            return super().recv(buflen, flags)
        except ssl.SSLError as exc:
            raise self._refusal(exc) from exc

    def send(self, data: Any, flags: int = 0) -> int:
        try:
            return super().send(data, flags)
        except ssl.SSLError as exc:
            raise self._refusal(exc) from exc

    def sendall(self, data: Any, flags: int = 0) -> None:
        try:
            super().sendall(data, flags)
        except ssl.SSLError as exc:
            raise self._refusal(exc) from exc

    def _refusal(self, exc: ssl.SSLError) -> ssl.SSLError:
        """What a client reports for a TLS failure: a refusal when its meaning is plain."""
        if self.server_side:
            return exc
        if isinstance(exc, ssl.SSLCertVerificationError):
            return TlsRefused(
                f"the certificate of {self.server_hostname} is not trusted "
                f"({exc.verify_message}): give --tls-ca the CA that signed it, and make the "
                "certificate name the address the daemon is reached at"
            )
        if exc.reason in _CLIENT_CERT_REFUSED:
            return TlsRefused(
                f"{self.server_hostname} refused this process's certificate ({exc.reason}): "
                "give --tls-cert/--tls-key signed by the CA the daemon trusts"
            )
        return exc


_CLIENT_CERT_REFUSED = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV1_ALERT_UNKNOWN_CA",
}
"""TLS alerts a daemon sends when it does not accept the client's certificate."""


class TlsRefused(ssl.SSLError):
    """A TLS failure that is a refusal: its text carries ``wire.REFUSED``, so proxies'
    callers see a NotAuthorized (``as_refusal``) and do not retry."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{REFUSED}TLS: {reason}")

    def __str__(self) -> str:
        return str(self.args[0])


def _refuse_plain_pyro(sock: ssl.SSLSocket) -> None:
    """On a daemon's new connection, before its TLS handshake: a client that sends a
    plain Pyro message gets a plain ``MSG_CONNECTFAIL`` saying TLS is required, and the
    connection ends (raises ConnectionRefusedError). Anything else goes on to TLS."""
    try:
        head = socket.socket.recv(sock, len(_PYRO_MAGIC), socket.MSG_PEEK | socket.MSG_WAITALL)
    except OSError:
        return  # the TLS read that follows reports it
    if head != _PYRO_MAGIC:
        return
    peer = _peer(sock)
    log.warning("refused a plain-text connection from %s: TLS is required", peer)
    with contextlib.suppress(Exception):
        msg = protocol.recv_stub(_RawConnection(sock), [protocol.MSG_CONNECT])
        serializer = serializers.serializers_by_id[msg.serializer_id]
        refusal = serializer.dumps(plain_refusal())
        reply = protocol.SendingMessage(
            protocol.MSG_CONNECTFAIL, 0, msg.seq, msg.serializer_id, refusal
        )
        socket.socket.sendall(sock, reply.data)
    raise ConnectionRefusedError(f"plain-text client {peer} on a TLS daemon")


_PYRO_MAGIC = b"PYRO"
DRAIN_S = 0.2
PLAIN_REFUSED = (
    "TLS: this daemon accepts TLS connections only: give --tls-ca (and --tls-cert/--tls-key)"
)
"""What a plain-text client of a TLS daemon is told."""


def plain_refusal() -> str:
    """The refusal a plain-text client of a TLS daemon gets, as its handshake's reply
    carries it (from a worker, or from the lobby when its handshake came in pieces)."""
    return str(NotAuthorized(PLAIN_REFUSED))


class _RawConnection:
    """The bytes under a TLS socket that has not handshaken, for ``protocol.recv_stub``."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def recv(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = socket.socket.recv(self._sock, size - len(data))
            if not chunk:
                raise ConnectionResetError("closed before a whole message")
            data += chunk
        return bytes(data)


def _drain(sock: socket.socket) -> None:
    """Read what the peer sent, for DRAIN_S at most: closing with unread data resets the
    connection, and the client may then lose the alert that says why."""
    with contextlib.suppress(OSError):
        sock.settimeout(DRAIN_S)
        while socket.socket.recv(sock, 65536):
            pass


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"
