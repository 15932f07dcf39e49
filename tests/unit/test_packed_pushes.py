"""A push's packed form (``Batch.to_wire_packed``) and the link that falls back to the
plain form for a subscriber older than the broker (no proxy: a fake one)."""

from __future__ import annotations

from typing import Any

import msgpack
import msgspec
import pytest

from channel_server import dispatch
from channel_server.core.member import Batch
from channel_server.dispatch import MemberLink
from channel_server.errors import InvalidArgument
from channel_server.events import Event
from subscriber import client as subscriber_client

PAYLOADS: list[Any] = [
    "text",
    "é ✓",
    b"\x00\xff",
    None,
    7,
    -(2**63),
    2**64 - 1,
    1.5,
    [1, "a", None],
    {"k": {"n": [True, False]}},
]


def batch_of(payloads: list[Any], partition: Any = 3) -> Batch:
    events = [
        Event(f"e{n}", "pub", partition if n % 2 else f"p{n}", 1.0 + n, payload, 10 + n)
        for n, payload in enumerate(payloads)
    ]
    return Batch("default", "s1", 4, 21, events, [1 + n % 3 for n in range(len(events))])


def test_the_packed_form_decodes_to_the_plain_form() -> None:
    """What a subscriber decodes from a packed push is what the plain push carries:
    every field, its type and its order, each payload kind included."""
    batch = batch_of(PAYLOADS)
    packed, plain = batch.to_wire_packed(), batch.to_wire()
    assert packed is not None
    assert type(packed["events"]) is bytes
    decoded = msgspec.msgpack.decode(packed["events"])
    assert {k: v for k, v in packed.items() if k != "events"} == {"session": 4, "seq": 21}
    assert decoded == plain["events"]
    assert [list(d) for d in decoded] == [list(p) for p in plain["events"]]
    assert [type(d["payload"]) for d in decoded] == [type(p) for p in PAYLOADS]
    assert msgpack.unpackb(packed["events"]) == plain["events"]  # any msgpack reader agrees


@pytest.mark.parametrize("payload", [msgpack.Timestamp(1, 0), "\udc80"])
def test_a_payload_only_the_plain_encoder_carries_or_none_does_leaves_no_packed_form(
    payload: Any,
) -> None:
    """The plain push then goes (and if it fails too, the events at fault are found)."""
    assert batch_of(["ok", payload]).to_wire_packed() is None


class FakeProxy:
    """A subscriber's callback object as the link sees it: ``deliver_packed`` refused as
    an older subscriber refuses it (no such method), or taken."""

    def __init__(self, older: Exception | None = None) -> None:
        self.older = older
        self.calls: list[tuple[str, Any]] = []

    def deliver_packed(self, delivery: dict[str, Any]) -> dict[str, int]:
        self.calls.append(("deliver_packed", delivery))
        if self.older is not None:
            raise self.older
        return {"queued": len(msgspec.msgpack.decode(delivery["events"]))}

    def deliver(self, delivery: dict[str, Any]) -> dict[str, int]:
        self.calls.append(("deliver", delivery))
        return {"queued": len(delivery["events"])}

    _pyroConnection = "connected"

    def _pyroClaimOwnership(self) -> None:
        pass


def link_to(monkeypatch: pytest.MonkeyPatch, proxy: FakeProxy) -> MemberLink:
    monkeypatch.setattr(dispatch, "callback_proxy", lambda *_: proxy)
    monkeypatch.setattr(dispatch, "closed_by_peer", lambda _: False)
    return MemberLink("PYRO:subscriber.s1@127.0.0.1:1", "secret", 1.0, 1.0)


def test_a_link_pushes_packed_to_a_subscriber_that_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = FakeProxy()
    link = link_to(monkeypatch, proxy)
    for _ in range(2):
        reply, _elapsed = link.push(batch_of(["a", "b"]))
        assert reply == {"queued": 2}
    assert [method for method, _ in proxy.calls] == ["deliver_packed", "deliver_packed"]


@pytest.mark.parametrize("older", [None, AttributeError("no 'deliver_packed'")])
def test_a_link_offers_the_subscriber_its_wait_to_answer_with_acks_in_either_form(
    monkeypatch: pytest.MonkeyPatch, older: Exception | None
) -> None:
    proxy = FakeProxy(older)
    link = link_to(monkeypatch, proxy)
    link = MemberLink(link.callback, link.secret, 1.0, 1.0, answer_wait_s=0.005)
    link.push(batch_of(["a"]))
    assert [call[1]["answer_s"] for call in proxy.calls] == [0.005] * len(proxy.calls)


OLDER = [
    # how a Pyro5 proxy refuses a method the daemon's metadata does not list
    AttributeError("remote object 'PYRO:x' has no exposed attribute or method 'deliver_packed'"),
    # how the daemon refuses it (a proxy without metadata)
    InvalidArgument("method", "subscriber.s1 has no method 'deliver_packed'"),
]


@pytest.mark.parametrize("refusal", OLDER, ids=["proxy", "daemon"])
def test_a_link_falls_back_to_plain_pushes_for_an_older_subscriber_once(
    monkeypatch: pytest.MonkeyPatch, refusal: Exception
) -> None:
    proxy = FakeProxy(older=refusal)
    link = link_to(monkeypatch, proxy)
    for _ in range(3):
        reply, _elapsed = link.push(batch_of(["a", "b", "c"]))
        assert reply == {"queued": 3}
    assert [method for method, _ in proxy.calls] == [
        "deliver_packed",
        "deliver",
        "deliver",
        "deliver",
    ]
    assert proxy.calls[1][1] == batch_of(["a", "b", "c"]).to_wire()


def test_any_other_refusal_of_a_packed_push_is_the_push_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only "no such method" turns a link plain: a stale session is still a refusal."""
    proxy = FakeProxy()

    def stale(delivery: dict[str, Any]) -> dict[str, int]:
        raise InvalidArgument("session", "session 4 is older than 5")

    proxy.deliver_packed = stale  # type: ignore[method-assign]
    link = link_to(monkeypatch, proxy)
    with pytest.raises(InvalidArgument, match="older than"):
        link.push(batch_of(["a"]))
    assert proxy.calls == []


@pytest.mark.parametrize("events", [b"", b"\xc1", b"\x91" * 5000 + b"\xc0"])
def test_a_subscriber_refuses_packed_events_it_cannot_decode(events: bytes) -> None:
    with pytest.raises(InvalidArgument) as refused:
        subscriber_client._unpacked({"session": 1, "seq": 1, "events": events})
    assert refused.value.argument == "events"


def test_a_subscriber_leaves_a_push_that_is_not_packed_to_the_shape_check() -> None:
    plain = {"session": 1, "seq": 1, "events": [{"id": "a"}]}
    assert subscriber_client._unpacked(plain) is plain
    assert subscriber_client._unpacked("junk") == "junk"
