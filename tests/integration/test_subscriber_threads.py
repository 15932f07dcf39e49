"""A subscriber whose own thread fails stops at once and hands its events on, instead of
living on half alive: its worker, ended by an error while the process served on, left the
events it was pushed in flight until the channel's handler timeout (30 minutes), and the
process said nothing (session 33's review)."""

from __future__ import annotations

import threading

import pytest

from publisher import Publisher
from subscriber import Subscriber
from subscriber.record import Recorder
from tests.integration.conftest import Worker, channel_stats
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration
EVENTS = 40
PARTITIONS = 4


def test_a_worker_that_dies_stops_its_subscriber_and_the_others_do_its_events(
    cluster: Cluster,
) -> None:
    """The trigger is real: the record file's disk is full (its writes go to /dev/full, so
    the kernel refuses them), which the worker does not expect after a handler returns."""
    cluster.broker("jobs", extra=("--memory",))
    recorder = Recorder(cluster.tmp / "w1.jsonl", "w1")
    recorder._file.close()
    recorder._file = open("/dev/full", "a")  # noqa: SIM115 (the subscriber's stop closes it)
    other = Worker()
    failing = Subscriber("jobs", "w1", handler=lambda ev: None, ns_port=cluster.ns_port)
    failing._recorder = recorder
    with (
        failing,
        Subscriber("jobs", "w2", handler=other, ns_port=cluster.ns_port),
        Publisher("jobs", "P", ns_port=cluster.ns_port) as pub,
    ):
        events = [pub.event({"n": n}, partition=n % PARTITIONS) for n in range(EVENTS)]
        assert pub.publish(events)["accepted"] == EVENTS
        wait_until(
            lambda: len({ev["id"] for ev in other.events}) == EVENTS,
            20.0,
            "every event done by the subscriber left",
        )
    assert isinstance(getattr(failing, "failure", None), OSError)
    assert "No space left" in (failing.why_failed() or "")


def test_an_event_done_before_a_long_job_is_acknowledged_while_the_job_runs(
    cluster: Cluster,
) -> None:
    """A quick event and a long job in one push: the quick one's ack waited for the job
    to end, its partition's next event with it (session 33's Jepsen probe: 19 s)."""
    cluster.broker("jobs", extra=("--memory",))
    release = threading.Event()

    def handler(ev: dict) -> None:
        if ev["payload"] == "long":
            assert release.wait(60.0)

    with (
        Subscriber("jobs", "w1", handler=handler, ns_port=cluster.ns_port),
        Publisher("jobs", "P", ns_port=cluster.ns_port) as pub,
    ):
        batch = [pub.event("quick", partition=0), pub.event("long", partition=1)]
        assert pub.publish(batch)["accepted"] == 2
        try:
            wait_until(lambda: channel_stats(cluster, "jobs")["acked"] == 1, 10.0, "quick acked")
        finally:
            release.set()
        wait_until(lambda: channel_stats(cluster, "jobs")["acked"] == 2, 20.0, "both acked")
