"""What an event may carry (DESIGN §3): a payload's checks and size, and UTF-8 text.

A payload is a string, a byte string or a JSON-like value whose integers fit 64 bits, whose
map keys are strings and whose floats are finite: what msgpack (the wire and the store)
carries back unchanged and JSON can show. Pure: shared by the envelope's validation in
:mod:`channel_server.events` and the boundary checks in :mod:`channel_server.boundary`.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack

from channel_server.errors import InvalidEvent

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1
MAX_PAYLOAD_DEPTH = 64
NOT_UTF8 = "must be valid UTF-8 (no lone surrogates)"


def is_utf8(text: str) -> bool:
    """Whether a string can be encoded as UTF-8 (it has no lone surrogate such as
    ``"\\udc80"``): what msgpack, the store and every subscriber need. O(1) for ASCII."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def payload_size(payload: Any) -> int:
    """The bytes a valid payload takes on the wire: a string's UTF-8, a byte string's own
    length, the msgpack form of anything else (a store holding that form may use its
    length instead)."""
    if type(payload) is str:
        return len(payload) if payload.isascii() else len(payload.encode("utf-8"))
    if isinstance(payload, bytes | bytearray):
        return len(payload)
    return len(msgpack.packb(payload, use_bin_type=True))


def check_payload(value: Any, limit: int, index: int) -> tuple[Any, int]:
    """The payload (a bytearray becomes bytes) and its :func:`payload_size`, or
    InvalidEvent naming ``index``."""
    if type(value) is str:
        if value.isascii():
            size = len(value)
        else:
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise InvalidEvent("payload", NOT_UTF8, index) from None
    elif isinstance(value, bytes | bytearray):
        value, size = bytes(value), len(value)
    else:
        _check_json_like(value, index)
        size = _packed_size(value, index)
    if size > limit:
        raise InvalidEvent("payload", f"{size} bytes exceed the limit of {limit}", index)
    return value, size


def _check_json_like(value: Any, index: int, depth: int = 0) -> None:
    """Integers must fit 64 bits, map keys must be strings, byte strings may only be a
    whole payload and nothing else but None, booleans, numbers, strings, lists and maps
    is one. Strings are checked for UTF-8 when the payload is packed."""
    if depth > MAX_PAYLOAD_DEPTH:
        raise InvalidEvent("payload", f"nested deeper than {MAX_PAYLOAD_DEPTH} levels", index)
    if type(value) is int and not INT64_MIN <= value <= UINT64_MAX:
        raise InvalidEvent("payload", "an integer does not fit 64 bits", index)
    if type(value) is float and not math.isfinite(value):
        raise InvalidEvent("payload", "numbers must be finite (no NaN or infinity)", index)
    if isinstance(value, dict):
        if not all(type(k) is str for k in value):
            raise InvalidEvent("payload", "map keys must be strings", index)
        for item in value.values():
            _check_json_like(item, index, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_json_like(item, index, depth + 1)
    elif isinstance(value, bytes | bytearray):
        raise InvalidEvent("payload", "byte strings may only be the whole payload", index)
    elif not (value is None or isinstance(value, str | int | float)):  # bool is an int
        # msgpack's own timestamp (extension -1) decodes to one, and packs again
        raise InvalidEvent("payload", f"not a JSON-like value: {type(value).__name__}", index)


def _packed_size(value: Any, index: int) -> int:
    """The msgpack size of a JSON-like value; packing checks its strings are UTF-8."""
    try:
        return len(msgpack.packb(value, use_bin_type=True))
    except UnicodeEncodeError:
        raise InvalidEvent("payload", f"strings and map keys {NOT_UTF8}", index) from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidEvent("payload", f"not a JSON-like value: {exc}", index) from None
