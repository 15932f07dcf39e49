"""What a remote call must look like before it reaches a method (issue 13).

Pyro5 would hand a method whatever a client's serializer produced: objects rebuilt from
``__class__`` dicts, extension types, integer map keys, arguments that do not fit the
signature (an untyped ``TypeError``), unknown methods (an ``AttributeError``). A server here
decodes a call with plain msgpack only (:class:`StrictMsgpack`: no hooks, string map keys)
and refuses every such call with :class:`InvalidArgument`, whose one-line reason crosses the
wire as itself.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import Pyro5.serializers
import Pyro5.server
from Pyro5.serializers import MsgpackSerializer

from channel_server.errors import BrokerUnavailable, InvalidArgument
from channel_server.unpacking import unpack_strict

T = TypeVar("T", bound=type)
_serving = threading.local()
"""The daemon whose worker thread is decoding a call (set by ``serving``)."""
NO_STREAMS = "no item streams are served here"
_PROPERTY_CALLS = frozenset({"__getattr__", "__setattr__"})
EXPOSED_CACHE_SIZE = 4096
"""Answers kept of "is this an exposed method": every served class's methods and some
names callers made up (bounded: a caller sending random names only evicts answers)."""


def serving(daemon: Any) -> None:
    """Tell the decoder which daemon's objects a call on this thread may name."""
    _serving.daemon = daemon


class StrictMsgpack(MsgpackSerializer):
    """Pyro5's msgpack serializer, decoding calls strictly (replies are unchanged)."""

    def loadsCall(self, data: Any) -> tuple[str, str, list[Any], dict[str, Any]]:
        try:
            call = unpack_strict(self._convertToBytes(data))
        except Exception as exc:  # msgpack's errors are ValueError, TypeError and its own
            raise InvalidArgument("message", f"not a msgpack call: {exc}") from None
        if not (isinstance(call, list) and len(call) == 4):
            raise InvalidArgument("message", "a call is [object, method, args, kwargs]")
        target, method, args, kwargs = call
        if type(target) is not str or type(method) is not str:
            raise InvalidArgument("message", "object and method must be strings")
        if type(args) is not list or type(kwargs) is not dict:
            raise InvalidArgument("message", "args must be a list and kwargs a map")
        _check_target(target, method)
        return target, method, args, kwargs


CHANNEL_OBJECT_PREFIX = "channel."
"""The object ids of channels (a call for one no longer here is retried by the clients
through the name server: another broker of the database may serve it now)."""


def _check_target(target: str, method: str) -> None:
    daemon = getattr(_serving, "daemon", None)
    if daemon is None:
        return
    obj = daemon.objectsById.get(target)
    if obj is None:
        if target.startswith(CHANNEL_OBJECT_PREFIX):  # it moved, or the broker restarted
            channel = target[len(CHANNEL_OBJECT_PREFIX) :][:80]
            raise BrokerUnavailable(f"channel {channel}", "not served here: look it up again")
        raise InvalidArgument("object", f"no object {target[:80]!r} here")
    if not _exposed(obj.__class__, method):
        raise InvalidArgument("method", f"{target[:80]} has no method {method[:80]!r}")


@functools.lru_cache(maxsize=EXPOSED_CACHE_SIZE)
def _exposed(cls: type, method: str) -> bool:
    """Whether ``method`` is an exposed method of the class (asked once per class and
    name: the served objects' methods are class attributes, and do not change)."""
    return not (
        method in _PROPERTY_CALLS
        or Pyro5.server.is_private_attribute(method)
        or not getattr(inspect.getattr_static(cls, method, None), "_pyroExposed", False)
    )


def checked_arity(cls: T) -> T:
    """Class decorator (above ``@expose``): a call whose arguments do not fit an exposed
    method's signature raises InvalidArgument instead of TypeError."""
    for name in dir(cls):
        member = getattr(cls, name, None)
        if not name.startswith("_") and callable(member) and getattr(member, "_pyroExposed", False):
            setattr(cls, name, _arity_checked(member))
    return cls


def _arity_checked(method: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(method, "_arity_checked", False):
        return method

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except TypeError as exc:
            if exc.__traceback__ is not None and exc.__traceback__.tb_next is None:
                # raised binding the arguments: the method's body never ran
                raise InvalidArgument("arguments", f"{method.__name__}: {exc}") from None
            raise

    call._arity_checked = True  # type: ignore[attr-defined]
    return call


@checked_arity
class StrictDaemonObject(Pyro5.server.DaemonObject):
    """Pyro5's ``Pyro.Daemon`` object, with typed refusals of wrong arguments, of unknown
    objects and of item streams (no method here returns one)."""

    @Pyro5.server.expose
    def get_metadata(self, objectId: str) -> dict[str, Any]:
        if type(objectId) is not str or objectId not in self.daemon.objectsById:
            raise InvalidArgument("objectId", "no object of that id is served here")
        return super().get_metadata(objectId)

    @Pyro5.server.expose
    def get_next_stream_item(self, streamId: str) -> Any:
        raise InvalidArgument("streamId", NO_STREAMS)

    @Pyro5.server.expose
    def close_stream(self, streamId: str) -> None:
        raise InvalidArgument("streamId", NO_STREAMS)


def install() -> None:
    """Decode calls of this process's daemons strictly (idempotent)."""
    strict = StrictMsgpack()
    Pyro5.serializers.serializers["msgpack"] = strict
    Pyro5.serializers.serializers_by_id[strict.serializer_id] = strict
