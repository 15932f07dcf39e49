"""The validation rules of one batch event (DESIGN §3), stated once for both engines.

A value is first classified into a :class:`Kind` (what the input format says it is), then
checked field by field in :data:`FIELDS` order; the first failing check names the reason.
The Spark job (:mod:`spark_partitions.spark_rules`) builds the same checks as column
expressions, so the two engines reject the same rows with the same reasons.

Rules beyond ``channel_server.events.validate_event``, forced by a columnar batch:

* a missing field and a null one are the same; a missing or null ``partition`` becomes
  ``DEFAULT_PARTITION``;
* ``payload`` must be a string or null (a column has one type);
* a JSON-lines row with a key outside :data:`FIELDS` is rejected (``unknown field``), one
  with a repeated key at any depth is malformed (which value would a reader mean?), and so
  are NaN and Infinity, which are not JSON;
  CSV and Parquet inputs with such a column are refused whole (:class:`InputError`);
* ``-0.0`` timestamps become ``0.0`` (JSON parsers disagree on the sign of zero).
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Any, NamedTuple

from channel_server.events import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_PARTITION,
    INT64_MAX,
    INT64_MIN,
    MAX_ID_CHARS,
    MAX_PARTITION_CHARS,
    PUBLISHER_ID_PATTERN,
    IdScope,
)

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_PARTITION",
    "FIELDS",
    "Clean",
    "IdScope",
    "Kind",
    "Reason",
    "check",
    "kind_of",
]

FIELDS = ("id", "publisher_id", "partition", "timestamp", "payload")

# ``$`` also matches before a trailing newline in Python and Java; ``\Z`` / ``\z`` do not.
PUBLISHER_ID_BODY = PUBLISHER_ID_PATTERN.removeprefix("^").removesuffix("$")
PUBLISHER_ID_JAVA = rf"^(?:{PUBLISHER_ID_BODY})\z"
PUBLISHER_ID_RE = re.compile(PUBLISHER_ID_BODY)

# CSV has no types: a canonical integer that fits 64 bits is an int partition, and a
# timestamp must look like a plain decimal number (no "nan", "inf", "1_000" or spaces).
CSV_INT_BODY = r"-?(?:0|[1-9][0-9]*)"
CSV_NUMBER_BODY = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
CSV_INT_RE = re.compile(CSV_INT_BODY)
CSV_NUMBER_RE = re.compile(CSV_NUMBER_BODY)

# A JSON-lines line holding only JSON whitespace is skipped, like an empty one.
BLANK_LINE_BODY = r"[ \t\r\n]*"
BLANK_LINE_RE = re.compile(BLANK_LINE_BODY)


class Kind(StrEnum):
    """What the input format says a value is."""

    NULL = "null"
    STRING = "string"
    INT = "int"
    NUMBER = "number"
    OTHER = "other"


class Reason(StrEnum):
    """Why a row was rejected; the text lands in the rejects output."""

    MALFORMED_JSON = "malformed JSON"
    NOT_OBJECT = "not a JSON object"
    UNKNOWN_FIELD = "unknown field"
    FIELD_COUNT = "wrong number of CSV fields"
    ID_REQUIRED = "id: is required"
    ID_TYPE = "id: must be a non-empty string"
    ID_LENGTH = f"id: longer than {MAX_ID_CHARS} characters"
    PUBLISHER_REQUIRED = "publisher_id: is required"
    PUBLISHER_FORMAT = "publisher_id: must be 1-128 characters of [A-Za-z0-9._-]"
    PARTITION_TYPE = "partition: must be a string or an integer"
    PARTITION_LENGTH = f"partition: string must have 1-{MAX_PARTITION_CHARS} chars"
    PARTITION_RANGE = "partition: integer out of the 64-bit range"
    TIMESTAMP_REQUIRED = "timestamp: is required"
    TIMESTAMP_TYPE = "timestamp: must be a number"
    TIMESTAMP_FINITE = "timestamp: must be finite"
    PAYLOAD_TYPE = "payload: must be a string"
    PAYLOAD_SIZE = "payload: larger than the payload limit"


class Clean(NamedTuple):
    """A valid event, partition kept as text plus whether it was an integer."""

    id: str
    publisher_id: str
    partition: str
    partition_is_int: bool
    timestamp: float
    payload: str | None


def kind_of(value: Any) -> Kind:
    """Classify a Python value decoded from JSON, CSV (after :func:`csv_value`) or Parquet."""
    if value is None:
        return Kind.NULL
    if type(value) is str:
        return Kind.STRING
    if type(value) is int:
        return Kind.INT
    if type(value) is float or type(value).__name__ == "Decimal":
        return Kind.NUMBER
    return Kind.OTHER


def check(row: tuple[Any, ...], max_payload_bytes: int) -> Clean | Reason:
    """Validate one row of :data:`FIELDS` values; a :class:`Reason` says why it is invalid."""
    ident, publisher, partition, timestamp, payload = row
    reason = (
        _check_id(ident)
        or _check_publisher(publisher)
        or _check_partition(partition)
        or _check_timestamp(timestamp)
        or _check_payload(payload, max_payload_bytes)
    )
    if reason:
        return reason
    if partition is None:
        partition = DEFAULT_PARTITION
    return Clean(
        ident,
        publisher,
        str(partition),
        type(partition) is int,
        float(timestamp) + 0.0,
        payload,
    )


def _check_id(value: Any) -> Reason | None:
    if value is None:
        return Reason.ID_REQUIRED
    if type(value) is not str or not value:
        return Reason.ID_TYPE
    if len(value) > MAX_ID_CHARS:
        return Reason.ID_LENGTH
    return None


def _check_publisher(value: Any) -> Reason | None:
    if value is None:
        return Reason.PUBLISHER_REQUIRED
    if type(value) is not str or not PUBLISHER_ID_RE.fullmatch(value):
        return Reason.PUBLISHER_FORMAT
    return None


def _check_partition(value: Any) -> Reason | None:
    kind = kind_of(value)
    if kind is Kind.NULL:
        return None
    if kind is Kind.STRING:
        return None if 0 < len(value) <= MAX_PARTITION_CHARS else Reason.PARTITION_LENGTH
    if kind is Kind.INT:
        return None if INT64_MIN <= value <= INT64_MAX else Reason.PARTITION_RANGE
    return Reason.PARTITION_TYPE


def _check_timestamp(value: Any) -> Reason | None:
    kind = kind_of(value)
    if kind is Kind.NULL:
        return Reason.TIMESTAMP_REQUIRED
    if kind not in (Kind.INT, Kind.NUMBER):
        return Reason.TIMESTAMP_TYPE
    try:
        finite = math.isfinite(float(value))
    except OverflowError:  # an int beyond the float range
        finite = False
    return None if finite else Reason.TIMESTAMP_FINITE


def _check_payload(value: Any, limit: int) -> Reason | None:
    if value is None:
        return None
    if type(value) is not str:
        return Reason.PAYLOAD_TYPE
    # Four bytes per character at most: skip the encode for the common short payload.
    if len(value) * 4 > limit and len(value.encode("utf-8", "surrogatepass")) > limit:
        return Reason.PAYLOAD_SIZE
    return None


def csv_value(field: str, text: str) -> Any:
    """Type one CSV cell like the Spark CSV reader does: empty is null (see module doc)."""
    if text == "":
        return None
    if field == "partition" and CSV_INT_RE.fullmatch(text):
        number = int(text)
        return number if INT64_MIN <= number <= INT64_MAX else text
    if field == "timestamp" and CSV_NUMBER_RE.fullmatch(text):
        return float(text)
    return text
