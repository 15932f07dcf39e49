"""The two forms of a publish and of a push, against a real broker process: this
version's clients pack their batches and take packed pushes; a client of the plain form
(a list of event maps, a callback object without ``deliver_packed``) is still served,
event for event the same."""

from __future__ import annotations

from collections import Counter
from typing import Any

import Pyro5.api
import pytest

from channel_server.strict_calls import checked_arity
from publisher import Publisher
from subscriber import Subscriber
from subscriber import client as subscriber_client
from tests.integration.conftest import Worker
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration

PAYLOADS: list[Any] = ["text", b"\x00\xff", None, 2**64 - 1, 1.5, [1, "a"], {"k": {"n": [True]}}]


def publish_all(pub: Publisher) -> list[dict[str, Any]]:
    events = [pub.event(payload, partition=n % 3) for n, payload in enumerate(PAYLOADS * 3)]
    assert pub.publish(events)["accepted"] == len(events)
    return events


def received(worker: Worker, count: int) -> list[dict[str, Any]]:
    wait_until(lambda: len(worker.events) >= count, timeout_s=20)
    return sorted(worker.events, key=lambda ev: ev["offset"])


def published_and_received(
    cluster: Cluster, sub_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Events published through a broker to one subscriber, and what its handler got."""
    cluster.broker("jobs")
    worker = Worker()
    with Subscriber("jobs", sub_id, handler=worker, ns_port=cluster.ns_port):
        with Publisher("jobs", "P", ns_port=cluster.ns_port) as pub:
            sent = publish_all(pub)
            assert pub.wait(timeout_s=20)["outstanding"] == 0
        return sent, received(worker, len(sent))


def test_packed_pushes_reach_the_handler_as_the_events_published(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    forms: Counter[str] = Counter()
    unpacked = subscriber_client._unpacked

    def counted(delivery: Any) -> Any:
        forms["packed" if type(delivery.get("events")) is bytes else "plain"] += 1
        return unpacked(delivery)

    monkeypatch.setattr(subscriber_client, "_unpacked", counted)
    sent, got = published_and_received(cluster, "w1")
    assert [(ev["id"], ev["payload"], ev["partition"]) for ev in got] == [
        (ev["id"], ev["payload"], ev["partition"]) for ev in sent
    ]
    assert forms["packed"] >= 1 and forms["plain"] == 0


@checked_arity
class OlderReceiver:
    """A subscriber's callback object from before packed pushes: ``deliver`` only."""

    plain_pushes = 0

    def __init__(self, subscriber: Subscriber) -> None:
        self._subscriber = subscriber

    @Pyro5.api.expose
    def deliver(self, delivery: dict[str, Any]) -> dict[str, Any]:
        assert isinstance(delivery["events"], list)
        OlderReceiver.plain_pushes += 1
        return self._subscriber._take_in(delivery)

    @Pyro5.api.expose
    def ping(self) -> str:
        return self._subscriber.subscriber_id


def test_an_older_subscriber_gets_every_event_in_plain_pushes(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subscriber_client, "_Receiver", OlderReceiver)
    sent, got = published_and_received(cluster, "old")
    assert [ev["payload"] for ev in got] == [ev["payload"] for ev in sent]
    assert [ev["attempt"] for ev in got] == [1] * len(sent)  # none pushed twice
    assert OlderReceiver.plain_pushes >= 1


def test_a_batch_published_as_a_plain_list_is_taken_as_a_packed_one_is(cluster: Cluster) -> None:
    """An older publisher's form: the same events, the same summary, duplicates alike."""
    cluster.broker("jobs")
    events = [
        {"id": f"e{n}", "publisher_id": "P", "timestamp": 1.0 + n, "payload": p}
        for n, p in enumerate(PAYLOADS)
    ]
    worker = Worker()
    with Subscriber("jobs", "w1", handler=worker, ns_port=cluster.ns_port):
        with Publisher("jobs", "P", ns_port=cluster.ns_port) as pub:
            plain = pub._call("publish", events)  # the list, as an older library sent it
            again = pub.publish(events)
        got = received(worker, len(events))
    assert plain == {"accepted": len(events), "duplicates": [], "refused": 0, "unrouted": 0}
    assert again["duplicates"] == [ev["id"] for ev in events]
    assert [ev["payload"] for ev in got] == PAYLOADS
