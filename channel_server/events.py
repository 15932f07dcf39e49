"""The event envelope and its validation at the RPC boundary (DESIGN §3).

Events travel as plain dicts (msgpack is fast on them); inside the broker they are frozen
:class:`Event` structs (msgspec: built in C, no GC header) ordered by
``(timestamp, offset)``. A batch is validated whole before anything is stored, so a
publisher that gets :class:`InvalidEvent` knows that none of its batch was kept.

Validation has two paths that accept the same batches. msgspec checks a batch's shape and
limits in C, and a short Python pass checks what it cannot (payloads, UTF-8, the publisher
id's characters): about a quarter of the cost of the field-by-field Python checks. Anything
that path refuses goes through those checks, which are the rule: they say which event and
field is wrong (and accept what msgspec refused only out of caution).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from enum import StrEnum
from operator import attrgetter
from typing import Annotated, Any

import msgpack
import msgspec

from channel_server.errors import InvalidEvent
from channel_server.payloads import INT64_MAX as INT64_MAX
from channel_server.payloads import INT64_MIN as INT64_MIN
from channel_server.payloads import NOT_UTF8, check_payload, is_utf8
from channel_server.unpacking import unpack_strict, within_bound

MAX_ID_CHARS = 256
MAX_PARTITION_CHARS = 256
MAX_PUBLISHER_ID_CHARS = 128
PUBLISHER_ID_PATTERN = rf"[A-Za-z0-9._-]{{1,{MAX_PUBLISHER_ID_CHARS}}}"
"""Matched against the whole string (fullmatch): no trailing newline slips through."""
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
DEFAULT_PARTITION = 0

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


class Event(msgspec.Struct, frozen=True, gc=False, eq=False, array_like=True):
    """One accepted event. Ordered by ``(timestamp, offset)``; equality is identity.

    ``gc=False``: an event refers to no other event (its payload came off the wire), so
    the collector need not track millions of them. ``array_like``: msgspec writes it as an
    array of its fields, as the SQLite store's journal keeps it.
    """

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


EVENT_ID = attrgetter("id")
EVENT_PUBLISHER = attrgetter("publisher_id")
EVENT_OFFSET = attrgetter("offset")
EVENT_SIZE = attrgetter("size")
EVENT_ACCEPTED_AT = attrgetter("accepted_at")
"""An event's fields as functions that run in C, for ``map``, ``sum`` and ``groupby`` over
the many events of a batch, a push or an ack."""


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
    known: dict[str, str] = {}
    try:
        shaped = msgspec.convert(batch, _PUBLISHED_BATCH)
        return [
            _shaped_event(
                raw, raw.payload, max_payload_bytes, index, first_offset + index * step, known
            )
            for index, raw in enumerate(shaped)
        ]
    except (msgspec.MsgspecError, ValueError, TypeError, InvalidEvent):
        # msgspec refused (or stumbled on a lone surrogate): the rule says which event
        # and field is wrong
        return validate_each(batch, max_payload_bytes, first_offset)


def pack_batch(events: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> bytes:
    """A batch as a publisher sends it: one msgpack blob (see :func:`validate_packed`).
    Raises InvalidEvent naming the event and field that msgpack cannot carry."""
    try:
        packed: bytes = msgpack.packb(events, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        validate_batch(events, max_payload_bytes=sys.maxsize)  # says which event and field
        raise InvalidEvent("batch", f"cannot be packed: {exc}") from None
    return packed


def validate_packed(
    blob: bytes, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, max_batch: int | None = None
) -> list[Event]:
    """:func:`validate_batch` of a packed batch, decoded and checked in C where it can be.

    msgspec decodes the envelopes straight into structs, leaving each payload as its raw
    bytes; one strict msgpack pass decodes every payload (string map keys only: msgspec
    would build maps of any keys, whose hashes a caller can make collide). A batch this
    path refuses, or one too large to decode without counting its containers, is
    decoded plainly and validated as a list: that says which event and field is wrong.
    """
    events = _validate_in_c(blob, max_payload_bytes, max_batch) if within_bound(blob) else None
    if events is not None:
        return events
    try:
        batch = unpack_strict(blob)
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidEvent(
            "batch", f"not a msgpack list of events: {exc or type(exc).__name__}"
        ) from None
    return validate_batch(batch, max_payload_bytes, max_batch)


def _validate_in_c(
    blob: bytes, max_payload_bytes: int, max_batch: int | None
) -> list[Event] | None:
    """:func:`validate_packed`'s fast path; None when it refuses the batch (the plain
    path then finds out why, and says so)."""
    try:
        shaped = _PACKED_BATCH.decode(blob)
        if max_batch is not None and len(shaped) > max_batch:
            return None
        payloads = unpack_strict(_msgpack_array(len(shaped), [raw.payload for raw in shaped]))
        known: dict[str, str] = {}
        return [
            _shaped_event(raw, payload, max_payload_bytes, index, -1, known)
            for index, (raw, payload) in enumerate(zip(shaped, payloads, strict=True))
        ]
    except (msgspec.MsgspecError, ValueError, TypeError, RecursionError, InvalidEvent):
        return None


def _msgpack_array(count: int, items: list[msgspec.Raw]) -> bytes:
    """A msgpack array of ``count`` values already encoded (an array 32 header first)."""
    return b"\xdd" + count.to_bytes(4, "big") + b"".join(items)


def validate_each(
    batch: list[Any] | tuple[Any, ...],
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    first_offset: int = -1,
) -> list[Event]:
    """The rule :func:`validate_batch` answers to: :func:`validate_event` on each event in
    turn (event i gets offset ``first_offset + i``, or -1); the first bad one raises."""
    step = 1 if first_offset >= 0 else 0
    known: dict[str, str] = {}  # publisher ids checked in this batch (usually one)
    return [
        validate_event(raw, max_payload_bytes, index, first_offset + index * step, known)
        for index, raw in enumerate(batch)
    ]


_FLOAT_MAX = sys.float_info.max


class _Published(msgspec.Struct, forbid_unknown_fields=True):
    """The published form's shape and limits, checked in C by :func:`msgspec.convert`.
    Each field is checked no more loosely than :func:`validate_event` checks it; what
    only Python can check is left to :func:`_shaped_event`."""

    id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]
    publisher_id: str
    timestamp: Annotated[float, msgspec.Meta(ge=-_FLOAT_MAX, le=_FLOAT_MAX)]
    partition: (
        Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
        | Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PARTITION_CHARS)]
    ) = DEFAULT_PARTITION
    payload: Any = None


_PUBLISHED_BATCH = list[_Published]


class _PackedPublished(_Published, forbid_unknown_fields=True):
    """:class:`_Published` as :func:`validate_packed` decodes it: the payload left as
    its msgpack bytes (nil when absent), for one strict pass over them all."""

    payload: msgspec.Raw = msgspec.Raw(b"\xc0")


_PACKED_BATCH = msgspec.msgpack.Decoder(list[_PackedPublished])


def _shaped_event(
    raw: _Published | _PackedPublished,
    payload: Any,
    max_payload_bytes: int,
    index: int,
    offset: int,
    known: dict[str, str],
) -> Event:
    """The checks msgspec left: an id, a string partition or a publisher id that is not
    a plain ASCII ``str`` seen before goes through the full check of its field."""
    event_id, partition, publisher_id = raw.id, raw.partition, raw.publisher_id
    if type(event_id) is not str or not event_id.isascii():
        event_id = _check_id(event_id, index)
    if type(partition) is not int:
        partition = _check_partition(partition, index)
    payload, size = check_payload(payload, max_payload_bytes, index)
    seen = known.get(publisher_id) if type(publisher_id) is str else None
    return Event(
        event_id,
        seen or _check_publisher_id(publisher_id, index, known),
        partition,
        raw.timestamp,
        payload,
        offset,
        len(event_id) + size,
    )


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
    payload, size = check_payload(raw.get("payload"), max_payload_bytes, index)
    return Event(
        id=event_id,
        publisher_id=_check_publisher_id(raw["publisher_id"], index, known_publishers),
        partition=_check_partition(raw.get("partition", DEFAULT_PARTITION), index),
        timestamp=_check_timestamp(raw["timestamp"], index),
        payload=payload,
        offset=offset,
        size=len(event_id) + size,
    )


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
    if isinstance(value, int) and type(value) is not bool:  # an IntEnum counts as its value
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidEvent("partition", "integer out of the 64-bit range", index)
        return int(value)
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


def _check_timestamp(value: Any, index: int) -> float:
    if type(value) is bool or not isinstance(value, float | int):
        raise InvalidEvent("timestamp", "must be a number (seconds since the epoch)", index)
    try:
        result = float(value)
    except OverflowError:
        raise InvalidEvent("timestamp", "must be finite", index) from None
    if not math.isfinite(result):
        raise InvalidEvent("timestamp", "must be finite", index)
    return result
