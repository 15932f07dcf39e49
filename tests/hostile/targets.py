"""What a fuzzed server exposes, read from the server itself, and how to call it wrongly.

Every daemon answers ``Pyro.Daemon.get_metadata(object_id)`` with the methods and
properties it exposes; a :class:`Target` is built from those answers, so a method added
later is fuzzed without touching this file. Parameter names (for near-valid arguments)
come from the class behind each object.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import Pyro5.server
from hypothesis import strategies as st
from Pyro5.protocol import MSG_INVOKE

from channel_server.broker_service import BrokerService
from channel_server.channel import EventChannel
from channel_server.nameservice import GuardedNameServer
from subscriber.client import _Receiver
from tests.hostile import strategies as hs
from tests.hostile.caller import BATCH, Call, Who
from tests.hostile.rawwire import (
    DAEMON_OBJECT,
    MSGPACK,
    SERIALIZER_IDS,
    RawConnection,
    call_payload,
    decode,
    frame,
    is_exception,
)

CLASSES: tuple[tuple[str, type], ...] = (
    (DAEMON_OBJECT, Pyro5.server.DaemonObject),
    ("Pyro.NameServer", GuardedNameServer),
    ("pubsub.broker.", BrokerService),
    ("channel.", EventChannel),
    ("subscriber.", _Receiver),
)
"""Which class serves an object id (exact id, or prefix)."""
SERIALIZERS = (MSGPACK,) * 9 + tuple(sorted(set(SERIALIZER_IDS) - {MSGPACK}))
"""Mostly msgpack (calls that get in); every other serializer too (they must not)."""
ODD_METHODS = ("__init__", "__class__", "__dict__", "_pyroId", "__getattr__", "__setattr__", "")


def class_of(object_id: str) -> type | None:
    for key, cls in CLASSES:
        if object_id == key or (key.endswith(".") and object_id.startswith(key)):
            return cls
    return None


@dataclass(frozen=True)
class Endpoint:
    """One object on a daemon: what it exposes and the public methods it does not."""

    object_id: str
    methods: tuple[str, ...]
    attrs: tuple[str, ...]
    owner_skips: frozenset[str] = frozenset()
    """Methods not fuzzed as the owner here (they would wipe state the later checks use;
    other callers still are, and the owner is on another server)."""

    @property
    def cls(self) -> type | None:
        return class_of(self.object_id)

    def hidden(self) -> tuple[str, ...]:
        """Public methods of the class that are not exposed (close, restore, ...)."""
        cls = self.cls
        if cls is None:
            return ()
        public = {n for n, v in inspect.getmembers(cls, callable) if not n.startswith("_")}
        return tuple(sorted(public - set(self.methods)))

    def parameters(self, method: str) -> tuple[list[str], int]:
        """Parameter names (after self) and how many are required; ([], 0) if unknown."""
        func = getattr(self.cls, method, None) if self.cls else None
        try:
            sig = inspect.signature(func)
        except (TypeError, ValueError):
            return [], 0
        params = [p for p in sig.parameters.values() if p.name != "self"]
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = sum(1 for p in params if p.default is p.empty and p.kind != p.VAR_POSITIONAL)
        return names, required


@dataclass(frozen=True)
class Target:
    """A daemon to fuzz: where it is, what it serves, who calls it."""

    name: str
    address: tuple[str, int]
    endpoints: tuple[Endpoint, ...]
    identities: tuple[Who, ...]
    names: tuple[str, ...]
    """Names it knows (channels, subscriber ids, ns entries): near-valid arguments."""
    dead_port: int
    """A port nobody listens on, for callback URIs."""

    @property
    def members(self) -> list[Who]:
        return [who for who in self.identities if who.admitted]


def read_endpoints(
    address: tuple[str, int], who: Who, object_ids: Sequence[str], owner_skips=frozenset()
) -> tuple[Endpoint, ...]:
    """Ask the daemon what each object exposes (as ``who``, over msgpack)."""
    found = []
    with RawConnection(address) as conn:
        conn.connect(who.credential)
        for seq, object_id in enumerate(object_ids, 1):
            payload = call_payload(MSGPACK, DAEMON_OBJECT, "get_metadata", [object_id])
            conn.send(frame(MSG_INVOKE, payload, seq=seq))
            reply = conn.receive()
            meta = decode(reply)
            assert not is_exception(reply), f"{object_id}: {meta!r}"
            skips = frozenset(owner_skips) & set(meta["methods"])
            found.append(
                Endpoint(object_id, tuple(sorted(meta["methods"])), tuple(meta["attrs"]), skips)
            )
    return tuple(found)


@st.composite
def calls(draw: st.DrawFn, target: Target) -> Call:
    """One hostile call on the target: any object, method, arity, arguments, caller.
    Most calls are in msgpack by a caller who gets in, on a real object, so that most
    reach the methods themselves."""
    endpoint = draw(st.sampled_from(target.endpoints))
    who = draw(_weighted(target.identities, lambda w: 3 if w.admitted else 1))
    method = draw(_methods(endpoint))
    if who.label == "owner" and method in endpoint.owner_skips:
        who = draw(st.sampled_from([w for w in target.identities if w.label != "owner"]))
    object_id = draw(_weighted([endpoint.object_id, None], lambda o: 7 if o else 1))
    object_id = object_id or draw(hs.one_of_names([endpoint.object_id]))
    if method == BATCH:
        args, kwargs = [draw(_batch(endpoint, target))], {}
    elif method == "__getattr__":
        args, kwargs = [draw(st.sampled_from([*endpoint.attrs, "name"]) | hs.texts)], {}
    else:
        args, kwargs = draw(arguments(endpoint, method, target))
    serializer = draw(st.sampled_from(SERIALIZERS))
    return Call(
        object_id, method, args, kwargs, serializer, who, _site(endpoint, object_id, method)
    )


def _weighted(items: Sequence[Any], weight: Callable[[Any], int]) -> st.SearchStrategy[Any]:
    return st.sampled_from([item for item in items for _ in range(weight(item))])


def _site(endpoint: Endpoint, object_id: str, method: str) -> str:
    """``Class.method`` for the tally; ``?`` for an object or a method nobody serves."""
    cls = endpoint.cls.__name__ if endpoint.cls and object_id == endpoint.object_id else "?"
    known = method in endpoint.methods or method in (BATCH, "__getattr__")
    return f"{cls}.{method if known else '?'}"


def _methods(endpoint: Endpoint) -> st.SearchStrategy[str]:
    exposed = st.sampled_from(endpoint.methods)
    odd = st.sampled_from([*ODD_METHODS, *endpoint.hidden(), BATCH]) | hs.texts
    return exposed | exposed | exposed | odd


@st.composite
def arguments(
    draw: st.DrawFn, endpoint: Endpoint, method: str, target: Target
) -> tuple[list[Any], dict[Any, Any]]:
    """Positional arguments of the right, too small or too large a number, each
    near-valid or random; sometimes keyword arguments, known names or not."""
    params, required = endpoint.parameters(method)
    right = st.sampled_from(sorted({required, len(params)}))
    count = draw(right | right | st.integers(0, len(params) + 2))
    args = [draw(_value(params[i] if i < len(params) else "", target)) for i in range(count)]
    key = st.sampled_from(params) | hs.keys if params else hs.keys
    none = st.just({})
    kwargs = draw(none | none | none | st.dictionaries(key, _value("", target), max_size=2))
    return args, kwargs


def _value(parameter: str, target: Target) -> st.SearchStrategy[Any]:
    return hs.for_parameter(parameter, target.names, target.dead_port)


def _batch(endpoint: Endpoint, target: Target) -> st.SearchStrategy[Any]:
    """A FLAGS_BATCH payload: [method, args, kwargs] triples, or junk."""
    triple = st.tuples(
        st.sampled_from(endpoint.methods) | hs.texts,
        st.lists(_value("", target), max_size=3),
        st.just({}) | st.dictionaries(hs.keys, hs.leaves, max_size=1),
    ).map(list)
    return st.lists(triple, max_size=3) | hs.trees
