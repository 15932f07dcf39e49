"""Publisher.submit against a real broker: events submitted one at a time are all stored
and processed in order, a bad event fails only its own submission, a full channel holds
submissions back until it has room, and wait/close flush what was submitted."""

from __future__ import annotations

import json
import signal
import sys
import threading
from concurrent.futures import Future
from typing import Any

import pytest
from Pyro5 import socketutil

from channel_client.reply_spin import SpinningConnection
from channel_server.errors import InvalidEvent, QueueFull
from publisher import Publisher
from subscriber import Subscriber
from tests.integration.conftest import Worker, channel_stats
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration
EVENTS = 2_000
WAIT_S = 30.0


def test_events_submitted_one_at_a_time_are_all_processed_in_partition_order(
    cluster: Cluster,
) -> None:
    cluster.broker("jobs")
    worker = Worker()
    with (
        Subscriber("jobs", "w1", handler=worker, ns_port=cluster.ns_port),
        Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub,
    ):
        futures = [pub.submit([pub.event({"n": n})]) for n in range(EVENTS)]
        done = pub.wait(timeout_s=WAIT_S)  # flushes the submissions first
        summaries = [f.result(timeout=0) for f in futures]
    one = {"accepted": 1, "duplicates": [], "refused": 0, "unrouted": 0}
    assert done["outstanding"] == 0
    assert all(summary == one for summary in summaries)
    assert sorted(ev["payload"]["n"] for ev in worker.events) == list(range(EVENTS))
    for partition in range(16):
        ns = [ev["payload"]["n"] for ev in worker.events if ev["partition"] == partition]
        assert ns == sorted(ns), f"partition {partition} out of order"
    assert channel_stats(cluster, "jobs")["accepted"] == EVENTS


def test_a_bad_event_fails_only_its_own_submission(cluster: Cluster) -> None:
    cluster.broker("jobs")
    with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub:
        good = [pub.submit([pub.event(n)]) for n in range(50)]
        bad_event = pub.event("bad")
        bad_event["timestamp"] = "yesterday"
        bad = pub.submit([pub.event("ok"), bad_event])
        good += [pub.submit([pub.event(n)]) for n in range(50)]
        pub.flush(WAIT_S)
    with pytest.raises(InvalidEvent) as refused:
        bad.result(timeout=0)
    assert (refused.value.field, refused.value.index) == ("timestamp", 1)
    assert [f.result(timeout=0)["accepted"] for f in good] == [1] * 100
    assert channel_stats(cluster, "jobs")["accepted"] == 100  # none of the bad submission's


def test_a_full_channel_holds_submissions_until_a_subscriber_makes_room(cluster: Cluster) -> None:
    cluster.broker("small", extra=("--capacity", "100"))
    worker = Worker()
    with Publisher("small", "P", ns_port=cluster.ns_port, state_dir=None) as pub:
        futures = [pub.submit([pub.event(n) for n in range(b * 50, b * 50 + 50)]) for b in range(6)]
        wait_until(lambda: futures[1].done(), what="the first 100 events stored")
        assert not futures[-1].done()  # waits for room, not refused
        with Subscriber("small", "w1", handler=worker, ns_port=cluster.ns_port):
            pub.wait(timeout_s=WAIT_S)
    assert sum(f.result(timeout=0)["accepted"] for f in futures) == 300
    assert sorted(ev["payload"] for ev in worker.events) == list(range(300))


def test_closing_while_the_channel_stays_full_fails_the_rest_with_queue_full(
    cluster: Cluster,
) -> None:
    cluster.broker("small", extra=("--capacity", "10"))
    pub = Publisher("small", "P", ns_port=cluster.ns_port, state_dir=None)
    stored = pub.submit([pub.event(n) for n in range(10)])
    held = pub.submit([pub.event(n) for n in range(10, 15)])
    wait_until(stored.done, what="the first 10 events stored")
    pub.close()
    assert stored.result(timeout=0)["accepted"] == 10
    with pytest.raises(QueueFull):
        held.result(timeout=0)
    with pytest.raises(ValueError, match="closed"):
        pub.submit([pub.event("late")])
    assert channel_stats(cluster, "small")["accepted"] == 10
    assert not [t for t in threading.enumerate() if t.name == "publisher-P-sender"]


EXITS_WITHOUT_CLOSE = """
import sys
from publisher import Publisher
pub = Publisher("jobs", "P", ns_port=int(sys.argv[1]), state_dir=None)
for n in range(500):
    pub.submit([pub.event(n)])
print("submitted", flush=True)
"""


def test_a_program_that_exits_without_closing_still_sends_what_it_submitted(
    cluster: Cluster,
) -> None:
    cluster.broker("jobs")
    done = cluster.run(["-c", EXITS_WITHOUT_CLOSE, str(cluster.ns_port)])
    assert (done.returncode, done.stdout) == (0, "submitted\n"), done.stderr
    assert channel_stats(cluster, "jobs")["accepted"] == 500


def test_a_broker_killed_mid_stream_loses_and_repeats_nothing_submitted(
    cluster: Cluster,
) -> None:
    # A small capacity keeps the sender busy (sending, or waiting out QueueFull) when the
    # broker is killed; its retries carry the stream over the restart.
    extra = ("--capacity", "200")
    broker = cluster.broker("a21", extra=extra)
    cluster.subscriber("a21", "s1", "--quiet")
    cluster.subscriber("a21", "s2", "--quiet")
    total = 3000
    with Publisher(
        "a21", "PUB", ns_port=cluster.ns_port, state_dir=None, partitions=4, retry_for_s=60
    ) as pub:
        futures = [pub.submit([pub.event(n)]) for n in range(total)]
        wait_until(lambda: channel_stats(cluster, "a21")["acked"] >= 300, what="stream running")
        assert not futures[-1].done()  # still to be sent when the broker dies
        broker.popen.send_signal(signal.SIGKILL)
        broker.popen.wait(10)
        cluster.broker("a21", extra=extra, name="broker")
        pub.flush(90)
        summaries = [f.result(timeout=0) for f in futures]
    assert sum(s["accepted"] + len(s["duplicates"]) for s in summaries) == total
    got = cluster.wait_for_records("a21", ("s1", "s2"), total, timeout_s=60)
    seqs = {sub: [int(r["id"].split("-")[1]) for r in records] for sub, records in got.items()}
    assert sorted(seqs["s1"] + seqs["s2"]) == list(range(1, total + 1))  # each exactly once
    for mine in seqs.values():
        for partition in range(4):
            ordered = [seq for seq in mine if seq % 4 == partition]
            assert ordered == sorted(ordered), f"partition {partition} out of order"


def test_threads_sharing_a_publisher_submit_events_with_distinct_ids(cluster: Cluster) -> None:
    cluster.broker("jobs")
    threads, each = 8, 300
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up
    try:
        with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub:
            futures: list[Future[dict[str, Any]]] = []

            def submitter(n: int) -> None:
                mine = [pub.submit([pub.event((n, i))]) for i in range(each)]
                futures.extend(mine)

            workers = [threading.Thread(target=submitter, args=(n,)) for n in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(WAIT_S)
            pub.flush(WAIT_S)
            senders = [t for t in threading.enumerate() if t.name == "publisher-P-sender"]
    finally:
        sys.setswitchinterval(switching)
    assert len(senders) == 1  # one pipeline, whichever thread submitted first
    assert len(futures) == threads * each
    assert sum(f.result(timeout=0)["accepted"] for f in futures) == threads * each
    assert channel_stats(cluster, "jobs")["accepted"] == threads * each  # no id twice


def test_a_submission_says_what_publish_would_have_said(cluster: Cluster) -> None:
    cluster.broker("jobs")
    with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub:
        known = pub.event("known")
        pub.publish([known])
        twice = pub.event("twice")
        summary = pub.submit([twice, dict(twice), known, pub.event("new")]).result(WAIT_S)
    assert summary == {
        "accepted": 2,
        "duplicates": [twice["id"], known["id"]],
        "refused": 0,
        "unrouted": 0,
    }


def test_the_cli_publishes_through_submit(cluster: Cluster) -> None:
    cluster.broker("jobs", extra=("--capacity", "500"))  # waited out, not refused
    cluster.subscriber("jobs", "s1", "--quiet")
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "jobs", "--id", "P"]
    argv += ["--count", "3000", "--batch-size", "10", "--submit", "--json"]
    argv += ["--state-dir", str(cluster.tmp / "pub-state")]
    done = cluster.run(argv)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.splitlines()[-1])
    assert (figures["accepted"], figures["duplicates"], figures["refused"]) == (3000, 0, 0)
    got = cluster.wait_for_records("jobs", ("s1",), 3000, timeout_s=60)
    assert sorted(int(r["id"].split("-")[1]) for r in got["s1"]) == list(range(1, 3001))


def test_publish_after_submit_keeps_their_order(cluster: Cluster) -> None:
    cluster.broker("jobs")
    worker = Worker()
    with (
        Subscriber("jobs", "w1", handler=worker, ns_port=cluster.ns_port),
        Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None, partitions=1) as pub,
    ):
        futures = [pub.submit([pub.event(n)]) for n in range(EVENTS)]
        pub.publish([pub.event("last")])
        assert all(f.done() for f in futures)  # sent before the publish
        pub.wait(timeout_s=WAIT_S)
    assert [ev["payload"] for ev in worker.events] == [*range(EVENTS), "last"]


def test_a_signal_stops_publish_submit_on_a_full_channel_with_what_was_done(
    cluster: Cluster,
) -> None:
    cluster.broker("small", extra=("--capacity", "10"))  # no subscriber: it stays full
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "small", "--id", "P"]
    argv += ["--count", "100", "--batch-size", "10", "--submit", "--json"]
    pub = cluster.start("publisher", argv, None)
    wait_until(lambda: channel_stats(cluster, "small")["accepted"] == 10, 15.0, "a full channel")
    pub.popen.send_signal(signal.SIGINT)
    assert pub.popen.wait(15.0) == 130  # not held by the full channel
    pub.kill()  # joins the output reader
    assert "Traceback" not in pub.output()
    figures = json.loads([line for line in pub.lines if line.startswith("{")][-1])
    assert (figures["accepted"], figures["refused"], figures["interrupted"]) == (10, 90, True)


def test_publish_may_wait_for_its_replies_awake_and_the_sender_never(cluster: Cluster) -> None:
    """The caller's own publishes may spin for their replies (where that pays); the submit
    sender, whose waits overlap the caller's work, never does."""
    cluster.broker("jobs")
    with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub:
        pub.publish([pub.event(1)])
        pub.submit([pub.event(2)]).result(timeout=WAIT_S)
        assert pub._sender is not None
        foreground = pub._remote._proxy._pyroConnection
        sender = pub._sender[1]._proxy._pyroConnection
    assert type(foreground) is SpinningConnection
    assert foreground.policy.calls > 0
    assert type(sender) is socketutil.SocketConnection


def test_a_publisher_told_not_to_spin_waits_for_its_replies_asleep(cluster: Cluster) -> None:
    cluster.broker("jobs")
    with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None, reply_spin_s=0) as pub:
        for n in range(3):
            pub.publish([pub.event(n)])
        assert type(pub._remote._proxy._pyroConnection) is socketutil.SocketConnection
