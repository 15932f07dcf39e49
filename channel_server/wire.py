"""The wire vocabulary shared by broker, publishers and subscribers.

Names in the name server, the serializer, the error classes' registration and small proxy
helpers. Importing this module loads Pyro5 but never the broker, its store or its threads.
"""

from __future__ import annotations

import re
import select
from typing import Any

import Pyro5.api
import Pyro5.errors
from Pyro5.serializers import SerializerBase

from channel_server import credentials, tls
from channel_server.credentials import Credential
from channel_server.errors import (
    ALL_ERRORS,
    REFUSED_MARK,
    BrokerUnavailable,
    ChannelError,
    InvalidArgument,
    NotAuthorized,
)

SERIALIZER = "msgpack"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_NS_PORT = 9090
NS_OBJECT = "Pyro.NameServer"
NS_CHANNEL_PREFIX = "pubsub.channel."
NS_BROKER_PREFIX = "pubsub.broker."
BROKER_TAG_PREFIX = "broker:"
IDS_TAG_PREFIX = "ids:"
"""A channel's name-server tag that says its id scope (``ids:publisher``, ``ids:channel``)."""
DEFAULT_GROUP = "default"
NAME_PATTERN = r"[A-Za-z0-9._-]{1,128}"
"""Matched against the whole string (fullmatch)."""
_NAME_RE = re.compile(NAME_PATTERN)
_ERRORS_BY_WIRE_NAME = {f"{cls.__module__}.{cls.__name__}": cls for cls in ALL_ERRORS}


def channel_ns_name(channel: str) -> str:
    return NS_CHANNEL_PREFIX + channel


def broker_ns_name(broker_id: str) -> str:
    return NS_BROKER_PREFIX + broker_id


def broker_tag(tags: Any) -> str | None:
    """The broker id in a channel's name-server tags (``broker:<id>``), if any."""
    return _tag(tags, BROKER_TAG_PREFIX)


def id_scope_tag(tags: Any) -> str | None:
    """The id scope in a channel's name-server tags (``ids:<scope>``), if any."""
    return _tag(tags, IDS_TAG_PREFIX)


def _tag(tags: Any, prefix: str) -> str | None:
    return next((t[len(prefix) :] for t in tags if t.startswith(prefix)), None)


def check_name(kind: str, value: Any) -> str:
    """Validate a channel, group, broker or subscriber name at the RPC boundary."""
    if type(value) is not str or not _NAME_RE.fullmatch(value):
        raise InvalidArgument(kind, "must be 1-128 characters of [A-Za-z0-9._-]")
    return value


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


def make_proxy(
    uri: str | Pyro5.api.URI, timeout_s: float | None, credential: Credential | None = None
) -> Pyro5.api.Proxy:
    """A msgpack proxy with its own timeout, which identifies itself with ``credential``
    (default: this process's, see :func:`credentials.ambient`) when it connects. It
    belongs to the calling thread."""
    register_errors()
    tls.from_environment()
    proxy = Pyro5.api.Proxy(uri)
    proxy._pyroSerializer = SERIALIZER
    if timeout_s:
        proxy._pyroTimeout = timeout_s
    who = credentials.ambient() if credential is None else credential
    proxy._pyroHandshake = who.handshake() if who and who.user else {}
    return proxy


def locate_ns(
    host: str, port: int, timeout_s: float = 5.0, credential: Credential | None = None
) -> Pyro5.api.Proxy:
    """The name server proxy at an explicit address (never by broadcast), with its
    timeout and credential set before it connects. Raises BrokerUnavailable or
    NotAuthorized."""
    ns = make_proxy(f"PYRO:{NS_OBJECT}@{host}:{port}", timeout_s, credential)
    try:
        ns._pyroBind()
    except Pyro5.errors.CommunicationError as exc:
        ns._pyroRelease()
        raise as_refusal(exc) or BrokerUnavailable(
            f"name server {host}:{port}", "not reachable"
        ) from exc
    return ns


def closed_by_peer(proxy: Pyro5.api.Proxy) -> bool:
    """Whether a connected proxy's server has closed the connection (a server closes one
    idle for its comm timeout): on an idle Pyro5 connection the server sends nothing, so
    anything to read means it is closing. One poll, no waiting."""
    conn = proxy._pyroConnection
    if conn is None:
        return False
    try:
        readable, _, _ = select.select([conn.sock], [], [], 0)
    except (OSError, ValueError):  # already closed here
        return True
    return bool(readable)


def as_refusal(exc: BaseException) -> NotAuthorized | None:
    """The NotAuthorized a refused connection means (the daemon said why), if it is one."""
    text = str(exc)
    if isinstance(exc, Pyro5.errors.CommunicationError) and REFUSED in text:
        return NotAuthorized(text.split(REFUSED, 1)[1])
    return None
