"""The wire vocabulary shared by broker, publishers and subscribers.

Names in the name server, the serializer, the error classes' registration and small proxy
helpers. Importing this module loads Pyro5 but never the broker, its store or its threads.
"""

from __future__ import annotations

import re
from typing import Any

import Pyro5.api
import Pyro5.errors
from Pyro5.serializers import SerializerBase

from channel_server.errors import ALL_ERRORS, BrokerUnavailable, ChannelError, InvalidArgument

SERIALIZER = "msgpack"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_NS_PORT = 9090
NS_CHANNEL_PREFIX = "pubsub.channel."
NS_BROKER_PREFIX = "pubsub.broker."
BROKER_TAG_PREFIX = "broker:"
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
    return next(
        (t[len(BROKER_TAG_PREFIX) :] for t in tags if t.startswith(BROKER_TAG_PREFIX)), None
    )


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


def make_proxy(uri: str | Pyro5.api.URI, timeout_s: float | None) -> Pyro5.api.Proxy:
    """A msgpack proxy with its own timeout; it belongs to the calling thread."""
    register_errors()
    proxy = Pyro5.api.Proxy(uri)
    proxy._pyroSerializer = SERIALIZER
    if timeout_s:
        proxy._pyroTimeout = timeout_s
    return proxy


def locate_ns(host: str, port: int, timeout_s: float = 5.0) -> Pyro5.api.Proxy:
    """The name server proxy, located at an explicit address (never by broadcast)."""
    try:
        ns = Pyro5.api.locate_ns(host, port)
    except Pyro5.errors.NamingError as exc:
        raise BrokerUnavailable(f"name server {host}:{port}", "not reachable") from exc
    ns._pyroTimeout = timeout_s
    return ns
