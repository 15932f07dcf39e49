"""The event envelope and its validation at the RPC boundary (DESIGN §3).

Events travel as plain dicts (msgpack is fast on them); inside the broker they are frozen,
slotted :class:`Event` objects ordered by ``(timestamp, offset)``. A batch is validated whole
before anything is stored, so a publisher that gets :class:`InvalidEvent` knows that none of
its batch was kept.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgpack

from channel_server.errors import InvalidEvent

MAX_ID_CHARS = 256
MAX_PARTITION_CHARS = 256
MAX_PUBLISHER_ID_CHARS = 128
PUBLISHER_ID_PATTERN = rf"[A-Za-z0-9._-]{{1,{MAX_PUBLISHER_ID_CHARS}}}"
"""Matched against the whole string (fullmatch): no trailing newline slips through."""
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
DEFAULT_PARTITION = 0
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1
MAX_PAYLOAD_DEPTH = 64

UID_SEPARATOR = "/"
MAX_UID_CHARS = MAX_PUBLISHER_ID_CHARS + len(UID_SEPARATOR) + MAX_ID_CHARS
"""The longest uid: a publisher id, the separator, an event id."""

PUBLISHED_FIELDS = frozenset({"id", "publisher_id", "partition", "timestamp", "payload"})
REQUIRED_FIELDS = ("id", "publisher_id", "timestamp")

_PUBLISHER_ID_RE = re.compile(PUBLISHER_ID_PATTERN)

Partition = str | int
PartitionKey = tuple[str, Partition]


class IdScope(StrEnum):
    """Where a channel's event ids must be unique, fixed when it is created (issue 13).

    ``publisher`` (the default): an event is a duplicate only if its publisher published
    its id before, so no publisher can block another's ids. ``channel``: ids are unique
    across the channel's publishers (the original rule, kept by channels created before).
    """

    PUBLISHER = "publisher"
    CHANNEL = "channel"


def event_uid(publisher_id: str, event_id: str) -> str:
    """An event's identity inside its channel, whatever the id scope: ``publisher_id/id``.
    Flights, acks, pull ``get``s and the subscribers' processed-ID windows use it. A
    publisher id has no ``/``, so the first one splits a uid unambiguously."""
    return f"{publisher_id}{UID_SEPARATOR}{event_id}"


@dataclass(frozen=True, slots=True, eq=False)
class Event:
    """One accepted event. Ordered by ``(timestamp, offset)``; equality is identity."""

    id: str
    publisher_id: str
    partition: Partition
    timestamp: float
    payload: Any
    offset: int = -1
    size: int = 0
    """Bytes it takes: its id's length plus :func:`payload_size`. The same for every copy
    of an event (one reloaded from a store too), so what a channel queues adds up."""
    accepted_at: float = 0.0
    """When this broker accepted it (its clock; the batch shares one float), for the
    publish-to-ack latency; 0 for an event restored from a store."""

    def __lt__(self, other: Event) -> bool:
        if self.timestamp != other.timestamp:
            return self.timestamp < other.timestamp
        return self.offset < other.offset

    @property
    def key(self) -> PartitionKey:
        """The partition sub-queue this event belongs to."""
        return (self.publisher_id, self.partition)

    @property
    def uid(self) -> str:
        """Its identity inside the channel (see :func:`event_uid`); computed, not stored:
        a channel holds a million events and needs it once or twice per delivery."""
        return f"{self.publisher_id}{UID_SEPARATOR}{self.id}"

    def to_dict(self, attempt: int = 1) -> dict[str, Any]:
        """The wire form pushed to subscribers."""
        return {
            "id": self.id,
            "publisher_id": self.publisher_id,
            "partition": self.partition,
            "timestamp": self.timestamp,
            "payload": self.payload,
            "offset": self.offset,
            "attempt": attempt,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        """Rebuild a delivered event (subscriber side); trusts the broker's validation."""
        return cls(
            id=data["id"],
            publisher_id=data["publisher_id"],
            partition=data["partition"],
            timestamp=data["timestamp"],
            payload=data["payload"],
            offset=data.get("offset", -1),
        )


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


def validate_batch(
    batch: Any,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    max_batch: int | None = None,
    first_offset: int = -1,
) -> list[Event]:
    """Validate a published batch whole; event i gets offset ``first_offset + i`` (or -1).

    Raises InvalidEvent naming the first bad field and its index; nothing is partially kept.
    """
    if not isinstance(batch, list | tuple):
        raise InvalidEvent("batch", f"must be a list of events, got {type(batch).__name__}")
    if max_batch is not None and len(batch) > max_batch:
        raise InvalidEvent("batch", f"{len(batch)} events exceed the limit of {max_batch}")
    step = 1 if first_offset >= 0 else 0
    known: dict[str, str] = {}  # publisher ids checked in this batch (usually one)
    return [
        validate_event(raw, max_payload_bytes, index, first_offset + index * step, known)
        for index, raw in enumerate(batch)
    ]


def validate_event(
    raw: Any,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    index: int = -1,
    offset: int = -1,
    known_publishers: dict[str, str] | None = None,
) -> Event:
    """Turn one published dict into an Event or raise InvalidEvent naming the field."""
    if not isinstance(raw, dict):
        raise InvalidEvent("event", f"must be a mapping, got {type(raw).__name__}", index)
    if not raw.keys() <= PUBLISHED_FIELDS:
        unknown = sorted(str(k) for k in raw.keys() - PUBLISHED_FIELDS)
        raise InvalidEvent(unknown[0], "unknown field", index)
    for name in REQUIRED_FIELDS:
        if name not in raw:
            raise InvalidEvent(name, "is required", index)
    event_id = _check_id(raw["id"], index)
    payload, size = _check_payload(raw.get("payload"), max_payload_bytes, index)
    return Event(
        id=event_id,
        publisher_id=_check_publisher_id(raw["publisher_id"], index, known_publishers),
        partition=_check_partition(raw.get("partition", DEFAULT_PARTITION), index),
        timestamp=_check_timestamp(raw["timestamp"], index),
        payload=payload,
        offset=offset,
        size=len(event_id) + size,
    )


NOT_UTF8 = "must be valid UTF-8 (no lone surrogates)"


def _check_id(value: Any, index: int) -> str:
    if type(value) is not str or not value:
        raise InvalidEvent("id", "must be a non-empty string", index)
    if len(value) > MAX_ID_CHARS:
        raise InvalidEvent("id", f"longer than {MAX_ID_CHARS} characters", index)
    if not value.isascii() and not is_utf8(value):
        raise InvalidEvent("id", NOT_UTF8, index)
    return value


def _check_publisher_id(value: Any, index: int, known: dict[str, str] | None) -> str:
    if known is not None and type(value) is str and value in known:
        return known[value]
    if type(value) is not str or not _PUBLISHER_ID_RE.fullmatch(value):
        raise InvalidEvent("publisher_id", "must be 1-128 characters of [A-Za-z0-9._-]", index)
    # Interned: a channel holds millions of events from a handful of publishers.
    interned = sys.intern(value)
    if known is not None:
        known[value] = interned
    return interned


def _check_partition(value: Any, index: int) -> Partition:
    if type(value) is int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidEvent("partition", "integer out of the 64-bit range", index)
        return value
    if type(value) is str:
        if not value or len(value) > MAX_PARTITION_CHARS:
            raise InvalidEvent(
                "partition", f"string must have 1-{MAX_PARTITION_CHARS} chars", index
            )
        if not value.isascii() and not is_utf8(value):
            raise InvalidEvent("partition", NOT_UTF8, index)
        return sys.intern(value)
    raise InvalidEvent(
        "partition", f"must be a string or an integer, not {type(value).__name__}", index
    )


def _check_json_like(value: Any, index: int, depth: int = 0) -> None:
    """Integers must fit 64 bits, map keys must be strings and byte strings may only be a
    whole payload: what msgpack (the wire and the store) carries back unchanged and JSON
    can show. Strings are checked for UTF-8 when the payload is packed."""
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


def _check_timestamp(value: Any, index: int) -> float:
    if type(value) not in (float, int):
        raise InvalidEvent("timestamp", "must be a number (seconds since the epoch)", index)
    try:
        result = float(value)
    except OverflowError:
        raise InvalidEvent("timestamp", "must be finite", index) from None
    if not math.isfinite(result):
        raise InvalidEvent("timestamp", "must be finite", index)
    return result


def _check_payload(value: Any, limit: int, index: int) -> tuple[Any, int]:
    """The payload and its :func:`payload_size`, or InvalidEvent."""
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


def _packed_size(value: Any, index: int) -> int:
    """The msgpack size of a JSON-like value; packing checks its strings are UTF-8."""
    try:
        return len(msgpack.packb(value, use_bin_type=True))
    except UnicodeEncodeError:
        raise InvalidEvent("payload", f"strings and map keys {NOT_UTF8}", index) from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidEvent("payload", f"not a JSON-like value: {exc}", index) from None
