"""Hypothesis strategies for hostile RPC arguments: random trees, and near-valid values.

Random trees alone rarely get past the first check of a method, so each parameter is also
drawn from values that look right for its name (an event, a subscriber id, a URI, a
count) with the odd field wrong. Trees carry what a msgpack client can send and more:
integer map keys, lone surrogates, NaN, 2**70, Pyro5 class dicts (``{"__class__": ...}``);
what a serializer cannot encode never leaves the client (tally ``unsendable``).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import msgpack
from hypothesis import strategies as st

NAME_CHARS = string.ascii_letters + string.digits + "._-"
CLASS_NAMES = (
    "Pyro5.core.URI",
    "Pyro5.core.Proxy",
    "Pyro5.errors.PyroError",
    "Pyro5.errors.CommunicationError",
    "builtins.ValueError",
    "channel_server.errors.InvalidEvent",
    "channel_server.errors.QueueFull",
    "nosuch.Class",
)
"""What a ``__class__`` key may name: classes Pyro5 rebuilds, ours, and unknown ones."""
HOSTILE_REGEXES = ("(a+)+$", "(a|aa)+b", ".*", "[", "pubsub\\..*")

chars = st.characters() | st.characters(categories=["Cs"])
"""Any character, lone surrogates included (msgpack cannot send those; others can)."""
texts = st.text(chars, max_size=24)
names_like = st.text(NAME_CHARS, min_size=1, max_size=16)
ints = st.integers() | st.sampled_from([0, 1, -1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1])
leaves = (
    st.none() | st.booleans() | ints | st.floats() | texts | st.binary(max_size=24) | names_like
)
keys = texts | st.integers() | st.sampled_from(["__class__", "id", "payload", "events"])
class_dicts = st.fixed_dictionaries(
    {"__class__": st.sampled_from(CLASS_NAMES)},
    optional={"args": st.lists(leaves, max_size=2), "state": leaves},
)
trees = st.recursive(
    leaves | class_dicts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=12,
)


def one_of_names(pool: Sequence[str]) -> st.SearchStrategy[str]:
    """A name from the pool (names the server knows), a valid-looking one, or any text."""
    return st.sampled_from(list(pool)) | names_like | texts


def timestamps() -> st.SearchStrategy[Any]:
    return st.floats(min_value=0, max_value=4e9) | st.floats() | ints | texts


def events(pool: Sequence[str]) -> st.SearchStrategy[dict[Any, Any]]:
    """An event dict: mostly well-formed fields, sometimes any value in any of them."""
    field = lambda good: good | trees  # noqa: E731
    return st.fixed_dictionaries(
        {
            "id": field(names_like | texts | st.text(NAME_CHARS, min_size=250, max_size=260)),
            "publisher_id": field(one_of_names(pool)),
            "timestamp": field(timestamps()),
        },
        optional={
            "partition": field(ints | names_like),
            "payload": trees | texts | st.binary(max_size=64),
            "offset": ints,
            "unexpected": leaves,
        },
    )


past_sessions = st.integers(max_value=0) | st.none() | st.floats() | texts
"""Sessions a subscriber has left behind (its current one is the clock in microseconds): a
delivery in a session from the future is the broker's own doing, as only it holds the
callback's secret, and would make the subscriber drop its real session."""


def uris(dead_port: int) -> st.SearchStrategy[Any]:
    """Callback and registration URIs: a port nobody listens on, other hosts, junk."""
    objects = names_like.map(lambda n: f"subscriber.{n}")
    hosts = st.sampled_from(["127.0.0.1", "localhost", "192.0.2.1", "::1", ""])
    pyro = st.builds(lambda o, h: f"PYRO:{o}@{h}:{dead_port}", objects, hosts)
    other = st.sampled_from(
        [
            "PYRONAME:pubsub.channel.fuzz",
            "PYROMETA:x",
            "PYRO:x@./u:/tmp/nowhere",
            "PYRO:",
            "http://x",
        ]
    )
    return pyro | other | texts


def packed(batch: Any) -> bytes:
    """A batch packed as the Publisher library sends it (one it cannot pack: a bad
    msgpack byte instead)."""
    try:
        return bytes(msgpack.packb(batch, use_bin_type=True))
    except (TypeError, ValueError, OverflowError):
        return b"\x91\xc1"


def for_parameter(name: str, pool: Sequence[str], dead_port: int) -> st.SearchStrategy[Any]:
    """A value that looks right for a parameter of this name (or a tree)."""
    ids = names_like | texts
    plausible: dict[str, st.SearchStrategy[Any]] = {
        "batch": st.lists(events(pool), max_size=4)
        | events(pool)
        | st.lists(events(pool), max_size=4).map(packed)
        | st.binary(max_size=64),
        "delivery": st.fixed_dictionaries(
            {
                "session": past_sessions,
                "seq": ints,
                "events": st.lists(events(pool), max_size=3)
                | st.lists(events(pool), max_size=3).map(packed)
                | st.binary(max_size=32),
            }
        ),
        "callback": uris(dead_port) | st.none(),
        "uri": uris(dead_port),
        "callback_secret": st.text(min_size=16, max_size=40) | texts,
        "acked": st.lists(ids, max_size=4),
        "nacked": st.dictionaries(ids, texts, max_size=3),
        "ids": st.none() | st.lists(ids, max_size=4),
        "last_id": st.none() | ids,
        "kind": st.sampled_from(["queue", "topic"]) | texts,
        "regex": st.none() | st.sampled_from(HOSTILE_REGEXES) | texts,
        "prefix": st.none() | one_of_names(["pubsub.", "pubsub.channel.", ""]),
        "metadata": st.frozensets(texts, max_size=3) | st.lists(texts, max_size=3),
        "meta_all": st.none() | st.frozensets(texts, max_size=3),
        "meta_any": st.none() | st.frozensets(texts, max_size=3),
    }
    if name in plausible:
        return plausible[name] | trees
    if name in {"prefetch", "session", "through_seq", "holding", "seq"}:
        return ints | trees
    if name in {"safe", "return_metadata"}:
        return st.booleans() | trees
    return one_of_names(pool) | trees
