"""Decoding msgpack from a caller strictly and within bounds (pure: no Pyro5).

Plain msgpack only: no hooks that rebuild objects, and map keys that are strings (or byte
strings), whose hashes Python randomizes. A map of keys a caller picked to share one hash
(tuples of integers can be) would make building it take quadratic time. The number of arrays
and maps is bounded too: each is a byte on the wire but some 60 bytes decoded.
"""

from __future__ import annotations

from typing import Any

import msgpack

MAX_CONTAINERS = 1_000_000
"""Arrays and maps one message may hold in all, and elements in one. Without a bound, a
64 MiB call of empty arrays would take gigabytes before anything could refuse it. A
publish of the most events a batch may hold (100,000) leaves nine per event for its
payload. A message of at most this many bytes cannot exceed it (each takes a byte at
least), so only larger ones are counted as they are decoded."""


def within_bound(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` is too short to hold more than MAX_CONTAINERS arrays and maps:
    it may be decoded without counting them."""
    return len(data) <= MAX_CONTAINERS


def unpack_strict(data: bytes | bytearray | memoryview) -> Any:
    """Decode one msgpack value strictly; raises ValueError (or msgpack's errors, which
    derive from it, or TypeError) when it is not one or exceeds the bounds."""
    if within_bound(data):
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    count = _ContainerBudget()
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=True,
        max_array_len=MAX_CONTAINERS,
        max_map_len=MAX_CONTAINERS,
        list_hook=count,
        object_hook=count,
    )


class _ContainerBudget:
    """Counts the arrays and maps a message decodes into (msgpack's hooks); refuses past
    MAX_CONTAINERS."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_CONTAINERS

    def __call__(self, container: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise ValueError(f"more than {MAX_CONTAINERS} arrays and maps")
        return container
