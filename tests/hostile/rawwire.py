"""Pyro5 frames by hand, on raw sockets: any serializer id, flags, sizes or bytes at all.

A Pyro5 proxy only sends what a well-behaved client sends; an attacker writes the socket
directly. These helpers build real frames with Pyro5's own ``SendingMessage`` and then
rewrite the header fields a test wants to lie about (flags, announced size).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from typing import Any, Self

import Pyro5.core
import Pyro5.errors
import Pyro5.protocol as wire
import Pyro5.serializers
import Pyro5.socketutil

from channel_server.credentials import Credential
from channel_server.wire import register_errors

MSGPACK = "msgpack"
SERIALIZER_IDS = {name: s.serializer_id for name, s in Pyro5.serializers.serializers.items()}
"""Every serializer this Pyro5 has, by name (serpent, marshal, json, msgpack)."""
DAEMON_OBJECT = Pyro5.core.DAEMON_NAME
HEADER_BYTES = struct.calcsize(wire._header_format)
FLAGS_AT, SIZE_AT = 8, 12
"""Offsets of the flags (2 bytes) and the data length (4 bytes) in the header."""
IO_TIMEOUT_S = 5.0


def address_of(uri: str) -> tuple[str, int]:
    parsed = Pyro5.core.URI(uri)
    return parsed.host, parsed.port


def frame(
    msgtype: int,
    payload: bytes = b"",
    *,
    serializer_id: int = SERIALIZER_IDS[MSGPACK],
    flags: int = 0,
    seq: int = 1,
    announced: int | None = None,
) -> bytes:
    """A Pyro5 message; ``flags`` and ``announced`` (the data length the header claims)
    are written over whatever Pyro5 would have put there."""
    data = bytearray(wire.SendingMessage(msgtype, 0, seq, serializer_id, payload).data)
    struct.pack_into("!H", data, FLAGS_AT, flags)
    if announced is not None:
        struct.pack_into("!I", data, SIZE_AT, announced)
    return bytes(data)


def connect_payload(
    serializer: str, credential: Credential | None, object_id: str, port: int
) -> bytes:
    """What a proxy sends to connect to the daemon at ``port``: its handshake data and
    the object it wants."""
    handshake = credential.handshake(port) if credential else {}
    dumps = Pyro5.serializers.serializers[serializer].dumps
    return dumps({"handshake": handshake, "object": object_id})


def call_payload(
    serializer: str, object_id: str, method: str, args: Any = (), kwargs: Any = None
) -> bytes:
    return Pyro5.serializers.serializers[serializer].dumpsCall(
        object_id, method, list(args), kwargs or {}
    )


class RawConnection:
    """A socket to a daemon that a test writes frames (or anything) on."""

    def __init__(self, address: tuple[str, int], timeout_s: float = IO_TIMEOUT_S) -> None:
        register_errors()
        self.sock = socket.create_connection(address, timeout=timeout_s)
        self.sock.settimeout(timeout_s)
        self._conn = Pyro5.socketutil.SocketConnection(self.sock, keep_open=True)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self) -> wire.ReceivingMessage:
        """The next message; Pyro5's ConnectionClosedError if the peer closed, the builtin
        TimeoutError if nothing came within the socket's timeout."""
        try:
            return wire.recv_stub(self._conn)
        except Pyro5.errors.TimeoutError as exc:  # Pyro5's own, not the builtin
            raise TimeoutError(str(exc)) from None

    def connect(
        self, credential: Credential | None, object_id: str = DAEMON_OBJECT, serializer=MSGPACK
    ) -> wire.ReceivingMessage:
        """Send the connect message and return the daemon's answer (OK or FAIL)."""
        payload = connect_payload(serializer, credential, object_id, self.sock.getpeername()[1])
        self.send(frame(wire.MSG_CONNECT, payload, serializer_id=SERIALIZER_IDS[serializer]))
        return self.receive()

    def closed_by_peer(self, timeout_s: float = IO_TIMEOUT_S) -> bool:
        """True once the peer has closed (or reset) the connection within ``timeout_s``,
        False if it is still open then. Anything the peer sends meanwhile is read and
        dropped."""
        deadline = time.monotonic() + timeout_s
        try:
            while (left := deadline - time.monotonic()) > 0:
                self.sock.settimeout(left)
                if not self.sock.recv(65536):
                    return True
        except TimeoutError:
            return False
        except OSError:  # reset
            return True
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def decode(msg: wire.ReceivingMessage) -> Any:
    """A reply's value: the result, or the exception object it carries."""
    return Pyro5.serializers.serializers_by_id[msg.serializer_id].loads(msg.data)


def is_exception(msg: wire.ReceivingMessage) -> bool:
    return bool(msg.flags & wire.FLAGS_EXCEPTION)
