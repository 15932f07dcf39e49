"""Pyro5 frames as the daemons read them: a header checked before its body (issue 13).

Each frame's header is checked before its body is read (:func:`read_header`): msgpack only,
no oneway (a thread per call), batched, compressed or blob calls, at most the transport's
``max_message_bytes`` (a handshake: ``HANDSHAKE_MAX_BYTES``). A body is read in pieces,
so a frame that never completes holds little memory.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from Pyro5 import protocol, socketutil
from Pyro5.serializers import MsgpackSerializer

HEADER_FORMAT = "!4sHBBHHII16sHH"
HEADER_BYTES = struct.calcsize(HEADER_FORMAT)
MAGIC = 0x4DC5
PYRO_TAG = b"PYRO"
"""The first bytes of every Pyro5 frame."""
MSGPACK_ID = MsgpackSerializer.serializer_id
HANDSHAKE_MAX_BYTES = 64 * 1024
"""A handshake carries a user name and password (or a callback secret) and an object id."""
SERVED_FLAGS = protocol.FLAGS_CORR_ID
READ_CHUNK_BYTES = 1 << 20
"""A big body is read in pieces, so a frame that never completes holds little memory."""


@dataclass(frozen=True)
class Frame:
    kind: int
    serializer: int
    flags: int
    seq: int
    size: int
    """Bytes after the header (annotations and data)."""


class FrameRefused(Exception):
    """A frame this server does not serve; the connection is closed after it."""

    def __init__(self, reason: str, frame: Frame | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.frame = frame


HANDSHAKE_KINDS = (protocol.MSG_CONNECT,)
CALL_KINDS = (protocol.MSG_INVOKE, protocol.MSG_PING)


def read_header(header: bytes, kinds: tuple[int, ...], max_bytes: int) -> Frame:
    """The frame a 40-byte header announces, if this server serves it."""
    tag, version, kind, serializer, flags, seq, size, notes, _, _, magic = struct.unpack(
        HEADER_FORMAT, header
    )
    if tag != PYRO_TAG or version != protocol.PROTOCOL_VERSION or magic != MAGIC:
        raise FrameRefused("not a Pyro5 frame of this protocol version", None)
    frame = Frame(kind, serializer, flags, seq, size + notes)
    limit = max_bytes if kind == protocol.MSG_INVOKE else HANDSHAKE_MAX_BYTES
    if kind not in kinds:
        raise FrameRefused(f"message type {kind} is not expected here", frame)
    if kind != protocol.MSG_PING and serializer != MSGPACK_ID:
        raise FrameRefused("this service speaks msgpack only", frame)
    if flags & ~SERVED_FLAGS:
        raise FrameRefused("oneway, batched, compressed and blob calls are refused", frame)
    if frame.size > limit:
        raise FrameRefused(f"a {frame.size}-byte message is over the limit of {limit}", frame)
    return frame


class CheckedConnection(socketutil.SocketConnection):
    """A served connection that checks each frame's header before reading its body."""

    def __init__(self, sock: socket.socket, prefix: bytes, max_bytes: int) -> None:
        super().__init__(sock)
        self.handshaken = False
        self._prefix = bytearray(prefix)
        """Bytes received ahead (the lobby read the handshake)."""
        self._header = bytearray()
        """The current frame's header, not yet handed to Pyro5."""
        self._body_left = 0
        self._max_bytes = max_bytes

    def recv(self, size: int) -> bytes:
        if size <= 0:
            return b""
        if not self._header and not self._body_left:
            header = self._read(HEADER_BYTES)
            kinds = CALL_KINDS if self.handshaken else HANDSHAKE_KINDS
            self._body_left = read_header(bytes(header), kinds, self._max_bytes).size
            self._header = header
        data = self._header[:size]
        del self._header[:size]
        if len(data) < size:
            body = self._read(size - len(data))
            self._body_left = max(0, self._body_left - len(body))
            data += body
        return bytes(data)

    def _read(self, size: int) -> bytearray:
        data = self._prefix[:size]
        del self._prefix[:size]
        while len(data) < size:
            data += socketutil.receive_data(self.sock, min(READ_CHUNK_BYTES, size - len(data)))
        return data
