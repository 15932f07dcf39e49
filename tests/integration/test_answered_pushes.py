"""Acks in a push's reply, end to end: a real broker process and the library's Subscriber.
A subscriber whose handler is quick answers pushes with their acks, so its control
thread sends few ack calls or none; against a broker that offers no wait
(``--answer-wait 0``) every ack goes by call. Either way each event is handled once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from subscriber import Subscriber
from tests.integration.conftest import Worker, channel_stats, publisher_for
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration
EVENTS = 300


def acked_by_call(cluster: Cluster, extra: tuple[str, ...]) -> tuple[int, Worker]:
    """Publish EVENTS to a fresh channel with one quick subscriber; the events its control
    thread acknowledged by ``ack`` calls, once all are acknowledged."""
    cluster.broker("jobs", extra=("--memory", *extra))
    worker = Worker()
    by_call: list[int] = []
    with Subscriber("jobs", "w1", handler=worker, ns_port=cluster.ns_port) as sub:
        assert sub._session is not None
        call = sub._session._call

        def counted(method: str, *args: Any) -> Any:
            if method == "ack" and args[3] > 0:  # not the goodbye's "these once more"
                by_call.append(len(args[4]))
            return call(method, *args)

        sub._session._call = counted  # type: ignore[method-assign]
        with publisher_for(cluster, "jobs", partitions=4) as pub:
            for start in range(0, EVENTS, 20):
                pub.publish([pub.event({"n": n}) for n in range(start, start + 20)])
        wait_until(lambda: channel_stats(cluster, "jobs")["acked"] == EVENTS, what="all acked")
    return sum(by_call), worker


def handled_once(worker: Worker) -> bool:
    return Counter(ev["id"] for ev in worker.events) == {
        f"PUB-{n}": 1 for n in range(1, EVENTS + 1)
    }


def test_a_quick_subscriber_answers_pushes_with_their_acks(cluster: Cluster) -> None:
    by_call, worker = acked_by_call(cluster, ())
    assert by_call < EVENTS  # some came in replies: none at all, on a quiet machine
    assert handled_once(worker)


def test_with_no_wait_offered_every_ack_goes_by_call(cluster: Cluster) -> None:
    by_call, worker = acked_by_call(cluster, ("--answer-wait", "0"))
    assert by_call == EVENTS
    assert handled_once(worker)
