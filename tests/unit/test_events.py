"""Event envelope and batch validation (DESIGN §3)."""

from __future__ import annotations

import math

import msgpack
import pytest

from channel_server.errors import InvalidEvent
from channel_server.events import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    INT64_MAX,
    INT64_MIN,
    MAX_ID_CHARS,
    Event,
    validate_batch,
    validate_event,
)
from channel_server.payloads import is_utf8, payload_size


def raw(**fields: object) -> dict:
    """A valid published event with some fields replaced (``...`` removes a field)."""
    event = {"id": "pub-1", "publisher_id": "pub", "partition": 0, "timestamp": 1.5, "payload": "x"}
    event.update(fields)
    return {k: v for k, v in event.items() if v is not ...}


def rejects(field: str, event: object, **kw: object) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as info:
        validate_event(event, **kw)
    assert info.value.field == field
    assert info.value.index == -1
    assert field in str(info.value)
    return info.value


# -- a valid event ------------------------------------------------------------------------
def test_valid_event_keeps_every_field() -> None:
    ev = validate_event(raw(payload={"a": [1, 2.5, None, True]}), offset=7)
    assert (ev.id, ev.publisher_id, ev.partition, ev.timestamp) == ("pub-1", "pub", 0, 1.5)
    assert ev.payload == {"a": [1, 2.5, None, True]}
    assert ev.offset == 7
    assert ev.key == ("pub", 0)


def test_defaults_partition_zero_and_payload_none() -> None:
    ev = validate_event(raw(partition=..., payload=...))
    assert ev.partition == 0
    assert ev.payload is None


def test_integer_timestamp_becomes_float() -> None:
    ev = validate_event(raw(timestamp=10))
    assert ev.timestamp == 10.0
    assert type(ev.timestamp) is float


# -- id -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["", None, 5, b"id", ["a"]])
def test_id_must_be_a_non_empty_string(value: object) -> None:
    rejects("id", raw(id=value))


def test_id_length_limit() -> None:
    assert validate_event(raw(id="i" * MAX_ID_CHARS)).id == "i" * MAX_ID_CHARS
    rejects("id", raw(id="i" * (MAX_ID_CHARS + 1)))


# -- publisher_id -------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["a", "A.b_c-9", "x" * 128])
def test_publisher_id_accepted(value: str) -> None:
    assert validate_event(raw(publisher_id=value)).publisher_id == value


@pytest.mark.parametrize(
    "value",
    ["", "x" * 129, "has space", "slash/", "é", "a:b", "\nabc", None, 3, b"pub"],
)
def test_publisher_id_rejected(value: object) -> None:
    rejects("publisher_id", raw(publisher_id=value))


def test_publisher_id_with_trailing_newline_rejected() -> None:
    # ``$`` in a re.match pattern also matches before a final newline.
    rejects("publisher_id", raw(publisher_id="abc\n"))


@pytest.mark.parametrize("bad", ["pub\n", "", ["pub"], {"p": 1}, None])
def test_publisher_id_checked_for_every_event_of_a_batch(bad: object) -> None:
    batch = [raw(id="e0"), raw(id="e1"), raw(id="e2", publisher_id=bad)]
    with pytest.raises(InvalidEvent) as info:
        validate_batch(batch)
    assert (info.value.field, info.value.index) == ("publisher_id", 2)


def test_batch_publisher_ids_are_shared_strings() -> None:
    events = validate_batch([raw(id="a", publisher_id="pub-x"), raw(id="b", publisher_id="pub-x")])
    assert [e.publisher_id for e in events] == ["pub-x", "pub-x"]
    assert events[0].publisher_id is events[1].publisher_id


# -- partition ----------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, -1, 7, INT64_MIN, INT64_MAX, "p", "k" * 256])
def test_partition_accepted(value: object) -> None:
    ev = validate_event(raw(partition=value))
    assert ev.partition == value
    assert type(ev.partition) is type(value)


@pytest.mark.parametrize(
    "value", [True, False, INT64_MAX + 1, INT64_MIN - 1, 1.0, None, "", "k" * 257, [1], b"p"]
)
def test_partition_rejected(value: object) -> None:
    rejects("partition", raw(partition=value))


# -- timestamp ----------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, 0.0, -5.5, 1.7e9, 2**62])
def test_timestamp_accepted(value: float) -> None:
    assert validate_event(raw(timestamp=value)).timestamp == float(value)


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        True,
        False,
        "1.5",
        None,
        [1.0],
        pytest.param(10**400, id="1e400"),
    ],
)
def test_timestamp_rejected(value: object) -> None:
    # 10**400 is an int msgpack can carry (Pyro5 ships big ints as an ext type) but that
    # has no float: it must be InvalidEvent like any other bad timestamp.
    rejects("timestamp", raw(timestamp=value))


# -- payload ------------------------------------------------------------------------------
def test_payload_kinds() -> None:
    assert validate_event(raw(payload="text")).payload == "text"
    assert validate_event(raw(payload=b"\x00\x01")).payload == b"\x00\x01"
    converted = validate_event(raw(payload=bytearray(b"ab"))).payload
    assert converted == b"ab"
    assert type(converted) is bytes
    for scalar in (None, 3, 2.5, True):
        assert validate_event(raw(payload=scalar)).payload == scalar
    nested = {"k": [1, {"n": None}], "s": "v"}
    assert validate_event(raw(payload=nested)).payload == nested


@pytest.mark.parametrize(
    "value", [{1, 2}, object(), {"a": {1, 2}}, [math.nan], {"x": math.inf}, {(1, 2): "k"}]
)
def test_payload_not_json_like_rejected(value: object) -> None:
    rejects("payload", raw(payload=value))


@pytest.mark.parametrize(
    "value",
    [INT64_MIN, INT64_MAX, [INT64_MAX, INT64_MIN], {"n": INT64_MAX}],
    ids=["min", "max", "list", "dict"],
)
def test_payload_64_bit_integers_accepted(value: object) -> None:
    assert validate_event(raw(payload=value)).payload == value


@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, [1, 2**70], {"n": 2**64}],
    ids=["2**64", "below-int64", "in-list", "in-dict"],
)
def test_payload_integer_beyond_64_bits_rejected(value: object) -> None:
    # Pyro5's msgpack serializer carries such ints to the broker (as its "long" ext type),
    # but msgpack cannot pack them into the store: it must be InvalidEvent, not an
    # OverflowError out of the store after validation said yes.
    rejects("payload", raw(payload=value))


def test_payload_size_limit_str_counts_utf8_bytes() -> None:
    limit = 16
    assert validate_event(raw(payload="a" * limit), max_payload_bytes=limit).payload == "a" * limit
    rejects("payload", raw(payload="a" * (limit + 1)), max_payload_bytes=limit)
    # 6 characters, 12 bytes: within 16 bytes; 9 characters are 18 bytes: too big.
    assert validate_event(raw(payload="é" * 6), max_payload_bytes=limit).payload == "é" * 6
    rejects("payload", raw(payload="é" * 9), max_payload_bytes=limit)


def test_payload_size_limit_bytes_and_structures() -> None:
    limit = 10
    assert (
        validate_event(raw(payload=b"b" * limit), max_payload_bytes=limit).payload == b"b" * limit
    )
    rejects("payload", raw(payload=b"b" * (limit + 1)), max_payload_bytes=limit)
    rejects("payload", raw(payload=bytearray(limit + 1)), max_payload_bytes=limit)
    fits = validate_event(raw(payload=[1, 2, 3, 4]), max_payload_bytes=limit)  # 5 B msgpack
    assert fits.payload == [1, 2, 3, 4]
    rejects("payload", raw(payload=list(range(10))), max_payload_bytes=limit)


def test_default_payload_limit_is_one_mebibyte() -> None:
    assert DEFAULT_MAX_PAYLOAD_BYTES == 1 << 20
    assert len(validate_event(raw(payload=b"x" * (1 << 20))).payload) == 1 << 20
    rejects("payload", raw(payload=b"x" * ((1 << 20) + 1)))


# -- shape --------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["offset", "attempt", "extra"])
def test_unknown_field_rejected(field: str) -> None:
    err = rejects(field, raw(**{field: 1}))
    assert err.reason == "unknown field"


@pytest.mark.parametrize("field", ["id", "publisher_id", "timestamp"])
def test_missing_required_field(field: str) -> None:
    err = rejects(field, raw(**{field: ...}))
    assert "required" in err.reason


@pytest.mark.parametrize("value", [None, "event", [("id", "x")], 5])
def test_non_dict_event_rejected(value: object) -> None:
    rejects("event", value)


# -- batches ------------------------------------------------------------------------------
def test_batch_offsets_are_first_offset_plus_index() -> None:
    batch = [raw(id=f"e{i}", timestamp=10 - i) for i in range(4)]
    events = validate_batch(batch, first_offset=100)
    assert [ev.offset for ev in events] == [100, 101, 102, 103]
    assert [ev.id for ev in events] == ["e0", "e1", "e2", "e3"]  # batch order, not sorted
    assert [ev.offset for ev in validate_batch(batch)] == [-1, -1, -1, -1]


def test_batch_error_names_field_and_index_and_keeps_nothing() -> None:
    batch = [raw(id="ok0"), raw(id="ok1"), raw(id="bad", timestamp=math.nan), raw(id="ok3")]
    result = None
    with pytest.raises(InvalidEvent) as info:
        result = validate_batch(batch, first_offset=0)
    assert result is None
    assert (info.value.field, info.value.index) == ("timestamp", 2)
    assert str(info.value).startswith("event #2: timestamp")


def test_batch_reports_the_first_bad_event() -> None:
    batch = [raw(), raw(partition=True), raw(id="")]
    with pytest.raises(InvalidEvent) as info:
        validate_batch(batch)
    assert (info.value.field, info.value.index) == ("partition", 1)


@pytest.mark.parametrize("value", [None, {"id": "x"}, "events", 3])
def test_batch_must_be_a_list(value: object) -> None:
    with pytest.raises(InvalidEvent) as info:
        validate_batch(value)
    assert (info.value.field, info.value.index) == ("batch", -1)


def test_batch_tuple_accepted_and_empty_batch_is_empty() -> None:
    assert len(validate_batch((raw(),))) == 1
    assert validate_batch([]) == []


def test_max_batch() -> None:
    batch = [raw(id=f"e{i}") for i in range(3)]
    assert len(validate_batch(batch, max_batch=3)) == 3
    with pytest.raises(InvalidEvent) as info:
        validate_batch(batch, max_batch=2)
    assert info.value.field == "batch"
    assert "3" in info.value.reason


def test_batch_payload_limit_passed_through() -> None:
    with pytest.raises(InvalidEvent) as info:
        validate_batch([raw(), raw(payload="xyz")], max_payload_bytes=2)
    assert (info.value.field, info.value.index) == ("payload", 1)


# -- the Event model ----------------------------------------------------------------------
def ev(ts: float, offset: int, eid: str = "e") -> Event:
    return Event(eid, "p", 0, ts, None, offset)


def test_events_order_by_timestamp_then_offset() -> None:
    a, b, c, d = ev(2.0, 0), ev(1.0, 5), ev(1.0, 3), ev(0.5, 9)
    assert sorted([a, b, c, d]) == [d, c, b, a]
    assert c < b
    assert not b < c
    assert not a < a


def test_event_equality_is_identity_and_frozen() -> None:
    one, two = ev(1.0, 1), ev(1.0, 1)
    assert one == one
    assert one != two
    with pytest.raises(AttributeError):
        one.offset = 2  # type: ignore[misc]


def test_event_wire_round_trip() -> None:
    event = Event("id-1", "pub", "k", 3.25, {"x": 1}, 42)
    wire = event.to_dict(attempt=3)
    assert wire == {
        "id": "id-1",
        "publisher_id": "pub",
        "partition": "k",
        "timestamp": 3.25,
        "payload": {"x": 1},
        "offset": 42,
        "attempt": 3,
    }
    back = Event.from_dict(wire)
    assert (back.id, back.key, back.timestamp, back.payload, back.offset) == (
        "id-1",
        ("pub", "k"),
        3.25,
        {"x": 1},
        42,
    )
    assert event.to_dict()["attempt"] == 1


# -- UTF-8 and map keys (issue 13) ------------------------------------------------------
POISON = "poison\udc80"
"""A lone surrogate: a Python str that no UTF-8 encoder (msgpack, SQLite) can carry."""


@pytest.mark.parametrize(
    ("field", "fields"),
    [
        ("id", {"id": POISON}),
        ("partition", {"partition": POISON}),
        ("payload", {"payload": POISON}),
        ("payload", {"payload": {"k": [1, POISON]}}),
        ("payload", {"payload": {POISON: 1}}),
        ("payload", {"payload": [{"deep": {"k": POISON}}]}),
    ],
    ids=["id", "partition", "payload", "nested-value", "map-key", "deep"],
)
def test_strings_must_be_valid_utf8(field: str, fields: dict) -> None:
    err = rejects(field, raw(**fields))
    assert "UTF-8" in err.reason


def test_non_ascii_utf8_strings_are_fine_everywhere() -> None:
    ev = validate_event(raw(id="é-1", partition="zürich", payload={"clé": ["ünïcode", "✓"]}))
    assert (ev.id, ev.partition, ev.payload) == ("é-1", "zürich", {"clé": ["ünïcode", "✓"]})


@pytest.mark.parametrize("payload", [{1: "a"}, {"k": {2: "b"}}, [{None: 1}]])
def test_payload_map_keys_must_be_strings(payload: object) -> None:
    err = rejects("payload", raw(payload=payload))
    assert err.reason == "map keys must be strings"


def test_byte_strings_only_as_the_whole_payload() -> None:
    assert validate_event(raw(payload=b"\xff")).payload == b"\xff"
    err = rejects("payload", raw(payload={"blob": b"\xff"}))
    assert "whole payload" in err.reason


def test_is_utf8() -> None:
    assert is_utf8("plain") and is_utf8("ünï ✓ 𝄞")
    assert not is_utf8(POISON)
    assert not is_utf8("\ud83d")  # half of a surrogate pair


# -- sizes: what a channel counts against max_queued_bytes ------------------------------
@pytest.mark.parametrize(
    ("payload", "payload_bytes"),
    [
        ("abc", 3),
        ("é✓", 5),  # UTF-8 bytes, not characters
        (b"\x00\x01", 2),
        (None, 1),
        ({"k": [1, 2]}, len(msgpack.packb({"k": [1, 2]}))),
    ],
    ids=["ascii", "utf8", "bytes", "none", "structure"],
)
def test_event_size_is_its_id_and_payload_bytes(payload: object, payload_bytes: int) -> None:
    ev = validate_event(raw(id="pub-1", payload=payload))
    assert ev.size == len("pub-1") + payload_bytes
    assert payload_size(ev.payload) == payload_bytes


def test_payload_limit_counts_the_msgpack_form_of_a_structure() -> None:
    value = {"k": "v" * 20}
    packed = len(msgpack.packb(value))
    assert validate_event(raw(payload=value), max_payload_bytes=packed).payload == value
    rejects("payload", raw(payload=value), max_payload_bytes=packed - 1)
