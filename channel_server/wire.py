"""The wire vocabulary shared by broker, publishers and subscribers.

The serializer, the error classes' registration and small proxy helpers, plus the names in
the name server (from :mod:`channel_server.names`, re-exported). Importing this module
loads Pyro5 but never the broker, its store or its threads; and Pyro5's client modules
only, not ``Pyro5.api``, which brings the name server and sqlite3 along.
"""

from __future__ import annotations

import select
import socket
from typing import Any

import Pyro5.client
import Pyro5.core
import Pyro5.errors
from Pyro5.callcontext import current_context
from Pyro5.serializers import SerializerBase

from channel_server import credentials, proofs, tls
from channel_server.credentials import Credential
from channel_server.errors import (
    ALL_ERRORS,
    REFUSED_MARK,
    BrokerUnavailable,
    ChannelError,
    NotAuthorized,
)
from channel_server.names import (
    BROKER_TAG_PREFIX,
    DEFAULT_GROUP,
    DEFAULT_HOST,
    DEFAULT_NS_PORT,
    IDS_TAG_PREFIX,
    NAME_PATTERN,
    NS_BROKER_PREFIX,
    NS_CHANNEL_PREFIX,
    NS_OBJECT,
    broker_ns_name,
    broker_tag,
    channel_ns_name,
    check_name,
    id_scope_tag,
)

# The wire's own helpers, and the names of channel_server.names (re-exported, so a client
# imports one module for both).
__all__ = [
    "ANONYMOUS",
    "BROKER_TAG_PREFIX",
    "DEFAULT_GROUP",
    "DEFAULT_HOST",
    "DEFAULT_NS_PORT",
    "IDS_TAG_PREFIX",
    "NAME_PATTERN",
    "NS_BROKER_PREFIX",
    "NS_CHANNEL_PREFIX",
    "NS_OBJECT",
    "REFUSED",
    "SERIALIZER",
    "as_refusal",
    "broker_ns_name",
    "broker_tag",
    "caller_gave_up",
    "channel_ns_name",
    "check_name",
    "closed_by_peer",
    "id_scope_tag",
    "locate_ns",
    "make_proxy",
    "register_errors",
]

SERIALIZER = "msgpack"
_ERRORS_BY_WIRE_NAME = {f"{cls.__module__}.{cls.__name__}": cls for cls in ALL_ERRORS}


def _rebuild_error(classname: str, data: dict[str, Any]) -> ChannelError:
    """Recreate one of our errors without calling its constructor (signatures differ)."""
    cls = _ERRORS_BY_WIRE_NAME[classname]
    error = cls.__new__(cls)
    Exception.__init__(error, *data.get("args", ()))
    for name, value in data.get("attributes", {}).items():
        setattr(error, name, value)
    return error


def register_errors() -> None:
    """Let our error classes cross the wire as themselves (idempotent)."""
    for wire_name in _ERRORS_BY_WIRE_NAME:
        SerializerBase.register_dict_to_class(wire_name, _rebuild_error)


ANONYMOUS = Credential("", "")
"""Connect without a credential (to find out whether a name server asks for one)."""
REFUSED = REFUSED_MARK
"""How a refused handshake reads in the client's CommunicationError."""


MAX_MESSAGE_BYTES = 64 << 20
"""The largest message a broker reads unless told otherwise (``--max-message-bytes``).
A client holds its calls to it, so a call too large is refused before it is sent, where
the broker would close the connection in the middle of it."""
PYRO5_MAX_MESSAGE_BYTES = 1 << 30
"""Pyro5's own limit, in force until this process sets one (a daemon sets its own)."""


PROOF_MISSING = "did not prove it knows the secret"


class MutualProxy(Pyro5.client.Proxy):  # type: ignore[misc]
    """A proxy that proves a secret in its handshake and goes on only with a daemon whose
    answer proves the same secret (:mod:`~channel_server.proofs`). Its handshake is made
    anew for each connection (a reconnect too), for the port it connects to."""

    def __init__(self, uri: Any, credential: Credential, role: str) -> None:
        object.__setattr__(self, "_mutual", (credential, role))  # (Proxy refuses other names)
        object.__setattr__(self, "_sent", {})
        super().__init__(uri)

    @property
    def _pyroHandshake(self) -> dict[str, Any]:
        """What Pyro5 sends as it connects: a fresh proof (and kept, for the answer)."""
        credential, _ = object.__getattribute__(self, "_mutual")
        sent: dict[str, Any] = credential.handshake(self._pyroUri.port or 0)
        object.__setattr__(self, "_sent", sent)
        return sent

    @_pyroHandshake.setter
    def _pyroHandshake(self, value: Any) -> None:
        """Pyro5 sets a default; ours is made for each connection instead."""

    def _pyroValidateHandshake(self, response: Any) -> None:
        credential, role = object.__getattribute__(self, "_mutual")
        sent = object.__getattribute__(self, "_sent")
        if not proofs.answer_ok(credential.secret, role, sent, response):
            raise Pyro5.errors.CommunicationError(
                f"{self._pyroUri.location} {PROOF_MISSING} "
                "(another process may have its port): nothing is sent there"
            )


def make_proxy(
    uri: str | Pyro5.core.URI, timeout_s: float | None, credential: Credential | None = None
) -> Pyro5.client.Proxy:
    """A msgpack proxy with its own timeout, which identifies itself with ``credential``
    (default: this process's, see :func:`credentials.ambient`) when it connects, and
    goes on only with a daemon that proves it knows the same secret when the credential
    allows (see ``Credential.answer_role``). It belongs to the calling thread."""
    register_errors()
    tls.from_environment()
    if Pyro5.config.MAX_MESSAGE_SIZE == PYRO5_MAX_MESSAGE_BYTES:
        Pyro5.config.MAX_MESSAGE_SIZE = MAX_MESSAGE_BYTES
    who = credentials.ambient() if credential is None else credential
    role = who.answer_role if who and who.user else None
    if who and role:
        proxy = MutualProxy(uri, who, role)
    else:
        proxy = Pyro5.client.Proxy(uri)
        proxy._pyroHandshake = who.handshake(proxy._pyroUri.port or 0) if who and who.user else {}
    proxy._pyroSerializer = SERIALIZER
    if timeout_s:
        proxy._pyroTimeout = timeout_s
    return proxy


def locate_ns(
    host: str, port: int, timeout_s: float = 5.0, credential: Credential | None = None
) -> Pyro5.client.Proxy:
    """The name server proxy at an explicit address (never by broadcast), with its
    timeout and credential set before it connects. Raises BrokerUnavailable or
    NotAuthorized."""
    ns = make_proxy(f"PYRO:{NS_OBJECT}@{host}:{port}", timeout_s, credential)
    try:
        ns._pyroBind()
    except Pyro5.errors.CommunicationError as exc:
        ns._pyroRelease()
        raise as_refusal(exc) or BrokerUnavailable(
            f"name server {host}:{port}", _why_unreachable(str(exc))
        ) from exc
    return ns


NS_NOT_REACHABLE = (
    "not reachable (no name server answers there: start a broker, `python -m channel_server "
    "serve`, which embeds one, or pass the --ns-host/--ns-port of yours)"
)
"""What a client is told when nothing answers at the name server's address: the usual
first step forgotten is the broker."""

BUSY_MARK = "rejected: busy: "
"""How a connection refused for want of a free worker reads (``transport``)."""


def _why_unreachable(text: str) -> str:
    """A name server's connection failure in a few words: busy (all its connections in
    use), something else on its port (no proof of the token), or not reachable."""
    if BUSY_MARK in text:
        return "busy: " + text.split(BUSY_MARK, 1)[1]
    if PROOF_MISSING in text:
        return text
    return NS_NOT_REACHABLE


def closed_by_peer(proxy: Pyro5.client.Proxy) -> bool:
    """Whether a connected proxy's server has closed the connection (a server closes one
    idle for its comm timeout): on an idle Pyro5 connection the server sends nothing, so
    anything to read means it is closing. One poll, no waiting."""
    conn = proxy._pyroConnection
    return conn is not None and _closing(conn.sock)


def caller_gave_up() -> bool:
    """Whether the caller of the request this thread serves has closed its connection
    already: it stopped waiting for the answer (a timeout) while the request sat unread
    (this process frozen, say). A Pyro5 caller sends one request at a time on a
    connection, so anything to read before the answer means it is closing."""
    sock = getattr(current_context.client, "sock", None)
    return sock is not None and _closing(sock)


def _closing(sock: socket.socket) -> bool:
    """Anything to read on a connection whose peer should be silent: it is closing. One
    poll, no waiting."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):  # already closed here
        return True
    return bool(readable)


def as_refusal(exc: BaseException) -> NotAuthorized | None:
    """The NotAuthorized a refused connection means (the daemon said why), if it is one."""
    text = str(exc)
    if isinstance(exc, Pyro5.errors.CommunicationError) and REFUSED in text:
        return NotAuthorized(text.split(REFUSED, 1)[1])
    return None
