"""A batch as publishers send it, one msgpack blob: packed by the client, decoded into
structs by the channel (validate_packed), with the bounds of the strict decoder. That it
accepts and refuses what the rule does is in test_events_two_paths."""

from __future__ import annotations

import math
from typing import Any

import msgpack
import pytest

from channel_server import events as events_module
from channel_server import unpacking
from channel_server.errors import InvalidEvent
from channel_server.events import Event, pack_batch, validate_batch, validate_packed
from channel_server.unpacking import MAX_CONTAINERS, unpack_strict


def batch_of(count: int, payload: Any = "x" * 100) -> list[dict[str, Any]]:
    return [
        {
            "id": f"e{n}",
            "publisher_id": "pub",
            "partition": n % 4,
            "timestamp": 1.0 + n,
            "payload": payload,
        }
        for n in range(count)
    ]


def fields(events: list[Event]) -> list[tuple[Any, ...]]:
    return [
        (e.id, e.publisher_id, e.partition, e.timestamp, e.payload, e.offset, e.size)
        for e in events
    ]


def test_a_valid_packed_batch_is_decoded_into_structs_without_the_list_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast path is taken: a field added to the envelope but not to the packed struct
    would send every batch through the plain decoder and the list checks, silently."""
    batch = [
        *batch_of(3),
        {
            "id": "m",
            "publisher_id": "pub",
            "partition": "eu",
            "timestamp": 7,
            "payload": {"k": [1, None]},
        },
        {"id": "n", "publisher_id": "pub", "timestamp": 8.5},
        {"id": "é", "publisher_id": "pub", "timestamp": 9.0, "payload": b"\x00\x01"},
    ]
    expected = fields(validate_batch(batch))

    def refuse(*_: object, **__: object) -> list[Event]:
        raise AssertionError("the list path was taken for a valid packed batch")

    monkeypatch.setattr(events_module, "validate_batch", refuse)
    got = validate_packed(pack_batch(batch))
    assert fields(got) == expected
    assert got[3].payload == {"k": [1, None]} and got[4].payload is None
    assert (got[4].partition, type(got[3].timestamp)) == (0, float)
    assert got[0].publisher_id is got[5].publisher_id  # one string for the batch


def test_a_payload_map_with_keys_that_are_not_strings_is_refused_before_it_is_built() -> None:
    """msgspec would build such a map, and tuple keys can be made to share one hash (so
    building it takes quadratic time): the strict decoder refuses the batch whole."""
    colliding = {(n, 0): 1 for n in range(2000)}
    blob = msgpack.packb(batch_of(1, payload=colliding), use_bin_type=True)
    with pytest.raises(InvalidEvent) as refused:
        validate_packed(blob)
    assert refused.value.field == "batch"
    assert "map key" in refused.value.reason


@pytest.mark.parametrize(
    "blob", [b"", b"\xc1", b"\x91", msgpack.packb("events"), msgpack.packb([1]) + b"\x00"]
)
def test_what_is_not_a_packed_list_of_events_is_refused_whole(blob: bytes) -> None:
    with pytest.raises(InvalidEvent) as refused:
        validate_packed(blob)
    assert refused.value.field == "batch"
    assert refused.value.reason


def test_a_packed_batch_longer_than_the_limit_is_refused_as_a_list_would_be() -> None:
    batch = batch_of(5)
    with pytest.raises(InvalidEvent) as as_list:
        validate_batch(batch, max_batch=4)
    with pytest.raises(InvalidEvent) as packed:
        validate_packed(pack_batch(batch), max_batch=4)
    assert (packed.value.field, packed.value.reason) == (as_list.value.field, as_list.value.reason)
    assert len(validate_packed(pack_batch(batch), max_batch=5)) == 5


def test_a_blob_too_large_to_decode_uncounted_goes_the_counted_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past MAX_CONTAINERS bytes a blob is decoded counting its arrays and maps (here
    with the bound lowered to a few hundred): a valid one still passes, whole; one with
    more containers than the bound is refused."""
    monkeypatch.setattr(unpacking, "MAX_CONTAINERS", 300)
    batch = batch_of(50)
    assert fields(validate_packed(pack_batch(batch))) == fields(validate_batch(batch))
    nested = batch_of(1, payload=[[[]] * 200, [[]] * 200])
    with pytest.raises(InvalidEvent) as refused:
        validate_packed(pack_batch(nested))
    assert refused.value.field == "batch"
    assert "more than 300 arrays and maps" in refused.value.reason


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"id": "a", "publisher_id": "p", "timestamp": 1.0, "payload": {1, 2}}, "payload"),
        ({"id": "\udc80", "publisher_id": "p", "timestamp": 1.0}, "id"),
        ({"id": "a", "publisher_id": "p", "timestamp": 1.0, "payload": 2**70}, "payload"),
    ],
)
def test_pack_batch_names_the_event_and_field_msgpack_cannot_carry(event: dict, field: str) -> None:
    with pytest.raises(InvalidEvent) as refused:
        pack_batch([{"id": "ok", "publisher_id": "p", "timestamp": 1.0}, event])
    assert (refused.value.field, refused.value.index) == (field, 1)


def test_a_nan_timestamp_and_an_infinite_one_are_refused_packed() -> None:
    for value in (math.nan, math.inf):
        with pytest.raises(InvalidEvent) as refused:
            validate_packed(pack_batch([{"id": "a", "publisher_id": "p", "timestamp": value}]))
        assert (refused.value.field, refused.value.index) == ("timestamp", 0)


def test_a_message_within_the_bound_in_bytes_is_decoded_without_counting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It cannot hold more containers than bytes; a larger one is counted."""
    built: list[object] = []
    original = unpacking._ContainerBudget

    def counting() -> object:
        built.append(1)
        return original()

    monkeypatch.setattr(unpacking, "_ContainerBudget", counting)
    small = msgpack.packb([[]] * 1000)
    assert unpack_strict(small) == [[]] * 1000
    assert built == []
    large = msgpack.packb([[]] * (MAX_CONTAINERS // 2) + ["x" * MAX_CONTAINERS])
    assert len(unpack_strict(large)) == MAX_CONTAINERS // 2 + 1
    assert built == [1]


@pytest.mark.parametrize(
    "payload",
    [msgpack.Timestamp(5, 0), {"at": msgpack.Timestamp(1, 0)}, [1, msgpack.Timestamp(1, 0)]],
    ids=["whole", "in-a-map", "in-a-list"],
)
def test_msgpacks_timestamp_is_not_a_json_like_payload(payload: Any) -> None:
    """msgpack decodes its timestamp extension (-1) to an object it packs again, so
    nothing else refused it: the strict decoder leaves it, the payload rule does not."""
    event = {"id": "a", "publisher_id": "p", "timestamp": 1.0, "payload": payload}
    for validate in (validate_batch, lambda b: validate_packed(pack_batch(b))):
        with pytest.raises(InvalidEvent) as refused:
            validate([event])
        assert (refused.value.field, refused.value.index) == ("payload", 0)
        assert "not a JSON-like value: Timestamp" in refused.value.reason
