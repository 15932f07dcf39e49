"""validate_batch's two paths agree (DESIGN §3): msgspec's shape check plus a short Python
pass, and the field-by-field Python checks (validate_event), which are the rule. So does
validate_packed (a batch as publishers send it: one msgpack blob, decoded into structs),
with the rule applied to what msgpack carries.

Random batches mix valid events with every kind of bad field a hostile publisher could
send over msgpack (and a few subclasses only an in-process caller could): whatever
validate_batch returns must be what validate_event returns event by event, and whatever it
refuses must be refused with the same field and index.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channel_server import events as events_module
from channel_server.errors import InvalidEvent
from channel_server.events import (
    INT64_MAX,
    INT64_MIN,
    MAX_ID_CHARS,
    MAX_PARTITION_CHARS,
    Event,
    pack_batch,
    validate_batch,
    validate_each,
    validate_event,
    validate_packed,
)
from channel_server.unpacking import unpack_strict

LIMIT = 200
"""A small payload limit, so that random payloads cross it."""


class Text(str):
    pass


class Level(enum.IntEnum):
    HIGH = 3


def near(limit: int) -> st.SearchStrategy[int]:
    return st.integers(min_value=limit - 2, max_value=limit + 2)


TEXT = st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=6)
ODD_TEXT = st.one_of(
    st.just(""),
    st.just("\udc80"),
    near(MAX_ID_CHARS).map(lambda n: "i" * n),
    near(MAX_PARTITION_CHARS).map(lambda n: "p" * n),
    st.builds(Text, TEXT),
    st.just("é" * 3),
)
ANY_TEXT = st.one_of(ODD_TEXT, TEXT)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**65),
    st.sampled_from([INT64_MIN, INT64_MAX, INT64_MIN - 1, INT64_MAX + 1, 10**400, True]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(Level.HIGH),
)
JSON_LIKE = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBERS, ANY_TEXT, st.binary(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(TEXT, st.integers(0, 3)), inner, max_size=4),
    ),
    max_leaves=12,
)
PAYLOADS = st.one_of(JSON_LIKE, near(LIMIT).map(lambda n: "x" * n), st.binary(max_size=LIMIT + 2))
PUBLISHER_IDS = st.one_of(
    st.sampled_from(["pub", "pub-2", "a.b_c"]),
    st.text(alphabet="ab-.$ ", min_size=0, max_size=4),
    st.builds(Text, st.just("pub")),
    near(128).map(lambda n: "p" * n),
)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "id": st.one_of(ANY_TEXT, NUMBERS, st.none()),
    "publisher_id": st.one_of(PUBLISHER_IDS, NUMBERS),
    "partition": st.one_of(NUMBERS, ANY_TEXT, st.none(), st.lists(st.integers(), max_size=1)),
    "timestamp": st.one_of(NUMBERS, TEXT, st.none()),
    "payload": PAYLOADS,
    "extra": st.integers(),
}


@st.composite
def raw_events(draw: st.DrawFn) -> Any:
    """Well-formed events with one or two fields drawn from anything."""
    event: dict[Any, Any] = {
        "id": draw(st.text(alphabet="abc", min_size=1, max_size=4)),
        "publisher_id": "pub",
        "partition": draw(st.integers(0, 3)),
        "timestamp": draw(st.floats(0, 1e9)),
        "payload": "x",
    }
    for field in draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=1, max_size=2)):
        event[field] = draw(VALUES[field])
    for field in draw(st.lists(st.sampled_from(["partition", "payload", "id"]), max_size=1)):
        event.pop(field, None)
    if draw(st.integers(0, 30)) == 0:
        return draw(st.one_of(st.none(), st.lists(st.integers(), max_size=2), st.just({1: 2})))
    return event


def fields(event: Event) -> tuple[Any, ...]:
    return (
        event.id,
        event.publisher_id,
        event.partition,
        type(event.partition),
        event.timestamp,
        event.payload,
        type(event.payload),
        event.offset,
        event.size,
    )


def by_the_rule(batch: list[Any], first_offset: int) -> list[Event] | InvalidEvent:
    """What the field-by-field checks say about ``batch``: its events, or the error."""
    try:
        return validate_each(batch, LIMIT, first_offset)
    except InvalidEvent as error:
        return error


def assert_paths_agree(batch: list[Any], first_offset: int) -> None:
    expected = by_the_rule(batch, first_offset)
    if isinstance(expected, InvalidEvent):
        with pytest.raises(InvalidEvent) as info:
            validate_batch(batch, LIMIT, first_offset=first_offset)
        assert (info.value.field, info.value.index, info.value.reason) == (
            expected.field,
            expected.index,
            expected.reason,
        )
    else:
        got = validate_batch(batch, LIMIT, first_offset=first_offset)
        assert [fields(ev) for ev in got] == [fields(ev) for ev in expected]


@settings(max_examples=600, deadline=None)
@given(st.lists(raw_events(), min_size=1, max_size=5), st.integers(0, 10))
def test_validate_batch_accepts_and_refuses_exactly_what_the_field_checks_do(
    batch: list[Any], first_offset: int
) -> None:
    assert_paths_agree(batch, first_offset)
    assert_packed_agrees(batch)


def assert_packed_agrees(batch: list[Any]) -> None:
    """validate_packed of the batch as msgpack carries it says what the rule says of the
    batch the broker decodes from it: a batch msgpack cannot carry is refused before it
    is sent, one the strict decoder refuses (a map key that is not a string) is refused
    whole."""
    try:
        blob = msgpack.packb(batch, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        with pytest.raises(InvalidEvent):
            pack_batch(batch)
        return
    assert pack_batch(batch) == blob
    try:
        carried = unpack_strict(blob)
    except ValueError:
        with pytest.raises(InvalidEvent) as refused:
            validate_packed(blob, LIMIT)
        assert (refused.value.field, refused.value.index) == ("batch", -1)
        return
    expected = by_the_rule(carried, -1)
    if isinstance(expected, InvalidEvent):
        with pytest.raises(InvalidEvent) as info:
            validate_packed(blob, LIMIT)
        got = (info.value.field, info.value.index, info.value.reason)
        assert got == (expected.field, expected.index, expected.reason)
    else:
        assert [fields(ev) for ev in validate_packed(blob, LIMIT)] == [
            fields(ev) for ev in expected
        ]


ODD_VALUES = [
    "",
    "\udc80",
    "é",
    Text("pub"),
    "i" * MAX_ID_CHARS,
    "i" * (MAX_ID_CHARS + 1),
    "p" * (MAX_PARTITION_CHARS + 1),
    "a b",
    True,
    Level.HIGH,
    -1,
    INT64_MIN - 1,
    INT64_MAX + 1,
    2**64,
    10**400,
    1.5,
    math.nan,
    math.inf,
    None,
    b"b",
    [1],
    {"k": 1},
    {1: 1},
    "x" * (LIMIT + 1),
]


@pytest.mark.parametrize("field", ["id", "publisher_id", "partition", "timestamp", "payload"])
@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_one_odd_field_after_a_valid_event(field: str, value: Any) -> None:
    """Each odd value in each field, behind a valid event of the same publisher (whose id
    the batch has then seen) and alone."""
    valid = {"id": "ok", "publisher_id": "pub", "partition": 0, "timestamp": 1.0}
    odd = {**valid, "id": "odd", field: value}
    assert_paths_agree([valid, odd], 0)
    assert_paths_agree([odd], 0)
    assert_packed_agrees([valid, odd])


def test_a_valid_batch_takes_the_msgspec_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path is taken (a field added to the envelope but not to ``_Published``
    would send every batch through the slow checks, silently)."""

    def slow(*_: object, **__: object) -> Event:
        raise AssertionError("validate_event was called for a valid batch")

    monkeypatch.setattr(events_module, "validate_event", slow)
    batch = [
        {"id": "a", "publisher_id": "p", "partition": 1, "timestamp": 2, "payload": {"k": [1]}},
        {"id": "b", "publisher_id": "p", "partition": "eu", "timestamp": 3.5},
        {"id": "é", "publisher_id": "p", "timestamp": 4.0, "payload": b"\x00"},
    ]
    got = validate_batch(batch, first_offset=5)
    assert [(e.id, e.partition, e.timestamp, e.offset) for e in got] == [
        ("a", 1, 2.0, 5),
        ("b", "eu", 3.5, 6),
        ("é", 0, 4.0, 7),
    ]
    assert got[0].publisher_id is got[2].publisher_id
    assert [type(e.timestamp) for e in got] == [float, float, float]


def test_an_int_enum_partition_and_timestamp_count_as_their_value() -> None:
    event = {"id": "a", "publisher_id": "p", "partition": Level.HIGH, "timestamp": Level.HIGH}
    for got in (validate_batch([event])[0], validate_event(event)):
        assert (got.partition, type(got.partition)) == (3, int)
        assert (got.timestamp, type(got.timestamp)) == (3.0, float)
    assert math.isfinite(validate_batch([event])[0].timestamp)
