"""The client library as a new user drives it, against a real broker process: a subscriber
that creates or waits for its channel, an even spread by default, waiting for the work
to be done, and the typed errors when something is missing."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from Pyro5.socketutil import SocketConnection

from channel_client.reply_spin import SpinningConnection
from channel_server.errors import (
    BrokerUnavailable,
    InvalidArgument,
    InvalidEvent,
    ProcessingTimeout,
    UnknownChannel,
)
from publisher import DEFAULT_PARTITIONS, Publisher, Putter
from publisher.client import RESERVE_AHEAD
from subscriber import PullClient, Subscriber
from subscriber.processed import ProcessedIds, window_path
from tests.integration.conftest import Worker, channel_stats
from tests.integration.procs import Cluster, free_port, wait_until

pytestmark = pytest.mark.integration


def subscriber_threads(sub_id: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(f"subscriber-{sub_id}-")]


def test_a_subscriber_creates_the_channel_and_wait_returns_when_all_is_done(
    cluster: Cluster,
) -> None:
    cluster.broker()  # no channels yet
    worker = Worker()
    with Subscriber("jobs", "w1", handler=worker, ns_port=cluster.ns_port, create=True):
        with Publisher("jobs", "P", ns_port=cluster.ns_port) as pub:  # it exists now
            summary = pub.publish([pub.event({"n": n}) for n in range(2 * DEFAULT_PARTITIONS)])
            assert summary["accepted"] == 2 * DEFAULT_PARTITIONS
            done = pub.wait(timeout_s=20)
        # wait returned: every event was processed, none is left to arrive
        assert len(worker.events) == 2 * DEFAULT_PARTITIONS
    assert done == {
        "outstanding": 0,
        "queued": 0,
        "in_flight": 0,
        "dead_letters": 0,
        "unserved": {},
    }
    assert Counter(ev["partition"] for ev in worker.events) == {
        p: 2 for p in range(DEFAULT_PARTITIONS)
    }
    first = min(worker.events, key=lambda ev: ev["offset"])
    assert set(first) == {
        "id",
        "publisher_id",
        "partition",
        "timestamp",
        "payload",
        "offset",
        "attempt",
    }  # the fields docs/api.md lists
    assert (first["id"], first["payload"], first["attempt"]) == ("P-1", {"n": 0}, 1)


def test_a_subscriber_waits_for_a_channel_someone_else_creates(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.broker()
    worker = Worker()
    sub = Subscriber("later", "w1", handler=worker, ns_port=cluster.ns_port, wait_for_channel_s=20)
    outcome: dict[str, Any] = {}

    def start() -> None:
        try:
            outcome["info"] = sub.start()
        except Exception as exc:
            outcome["error"] = exc

    starter = threading.Thread(target=start, name="test-start")
    with caplog.at_level(logging.WARNING, logger="subscriber"):
        starter.start()
        wait_until(lambda: "waiting for channel later" in caplog.text, what="the wait")
        with Publisher("later", "P", ns_port=cluster.ns_port, create=True) as pub:
            starter.join(20)
            assert outcome.get("info", {}).get("channel") == "later", outcome
            pub.publish([pub.event("hello")])
            pub.wait(timeout_s=20)
    sub.stop()
    assert [ev["payload"] for ev in worker.events] == ["hello"]
    assert caplog.text.count("waiting for channel later") == 1  # said once, not per look


def test_a_channel_that_never_comes_is_unknown_after_the_wait(cluster: Cluster) -> None:
    cluster.broker()
    sub = Subscriber(
        "nope", "w9", handler=Worker(), ns_port=cluster.ns_port, wait_for_channel_s=0.3
    )
    started = time.monotonic()
    with pytest.raises(UnknownChannel) as info:
        sub.start()
    assert time.monotonic() - started >= 0.3
    assert str(info.value) == "unknown channel 'nope'"
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert subscriber_threads("w9") == []  # nothing was started


def test_wait_raises_a_typed_timeout_when_nobody_processes(cluster: Cluster) -> None:
    cluster.broker()
    with Publisher("idle", "P", ns_port=cluster.ns_port, create=True) as pub:
        pub.publish([pub.event(n) for n in range(3)])
        with pytest.raises(ProcessingTimeout) as info:
            pub.wait(timeout_s=0.3)
    err = info.value
    assert isinstance(err, TimeoutError)
    assert (err.outstanding, err.queued, err.in_flight) == (3, 3, 0)
    assert "queued in groups with no subscriber: 'default' (3)" in str(err)
    assert err.unserved == {"default": 3}


def test_wait_names_the_default_group_a_named_group_s_subscriber_leaves_behind(
    cluster: Cluster,
) -> None:
    """A worker in a group of its own name on a queue processed every event, yet wait()
    timed out asking whether a subscriber was running: the queue's default group kept its
    share for nobody (session 36's newcomer)."""
    cluster.broker()
    worker = Worker()
    with (
        Subscriber("q", "w1", handler=worker, ns_port=cluster.ns_port, create=True, group="g"),
        Publisher("q", "P", ns_port=cluster.ns_port) as pub,
    ):
        pub.publish([pub.event(n) for n in range(5)])
        wait_until(lambda: len(worker.events) == 5, 20.0, "the worker's five")
        with pytest.raises(ProcessingTimeout) as info:
            pub.wait(timeout_s=0.3)
    assert info.value.unserved == {"default": 5}
    assert "a subscriber of another group does not take them" in str(info.value)


def test_a_failed_event_is_not_overtaken_by_the_rest_of_its_partition(cluster: Cluster) -> None:
    """An order's steps in one partition; the handler fails once on "charge". The order
    must not ship before it is charged: the steps after a failure wait for its retry."""
    cluster.broker()
    calls: list[tuple[str, int]] = []

    def handler(event: dict[str, Any]) -> None:
        calls.append((event["payload"], event["attempt"]))
        if event["payload"] == "charge" and event["attempt"] == 1:
            raise RuntimeError("card declined, try again")

    steps = ["create", "charge", "ship", "email"]
    with (
        Subscriber("orders", "s1", handler=handler, ns_port=cluster.ns_port, create=True),
        Publisher("orders", "P", ns_port=cluster.ns_port) as pub,  # after: it creates it
    ):
        pub.publish([pub.event(step, partition="order-42") for step in steps])
        done = pub.wait(timeout_s=20)
    assert done["dead_letters"] == 0
    assert calls[:2] == [("create", 1), ("charge", 1)]
    assert [step for step, attempt in calls if (step, attempt) != ("charge", 1)] == steps


def test_dead_letters_are_listed_and_replayed_from_the_library(cluster: Cluster) -> None:
    cluster.broker()
    broken = threading.Event()
    broken.set()
    handled: list[tuple[Any, int]] = []

    def handler(event: dict[str, Any]) -> None:
        if event["payload"] == "bad" and broken.is_set():
            raise ValueError("cannot parse")
        handled.append((event["payload"], event["attempt"]))

    with (
        Subscriber("jobs", "s1", handler=handler, ns_port=cluster.ns_port, create=True),
        Publisher("jobs", "P", ns_port=cluster.ns_port) as pub,
    ):
        pub.publish([pub.event("good"), pub.event("bad")])
        assert pub.wait(timeout_s=20)["dead_letters"] == 1
        (letter,) = pub.dead_letters()
        assert (letter["id"], letter["payload"], letter["error"]) == (
            "P-2",
            "bad",
            "ValueError: cannot parse",
        )
        broken.clear()  # the handler is fixed
        assert pub.replay_dead_letters(["P-2"]) == 1
        assert pub.wait(timeout_s=20)["dead_letters"] == 0
    assert handled == [("good", 1), ("bad", 1)]  # a replayed event starts at attempt 1


@pytest.mark.parametrize("handler", ["print", None, 42])
def test_a_handler_that_is_not_callable_is_refused_before_anything_starts(handler: Any) -> None:
    with pytest.raises(InvalidArgument, match="handler: must be callable"):
        Subscriber("jobs", "w1", handler=handler)


async def _async_handler(event: dict[str, Any]) -> None:
    raise AssertionError("never run: the Subscriber refuses it")


def _generator_handler(event: dict[str, Any]) -> Any:
    yield event


class _AsyncCall:
    async def __call__(self, event: dict[str, Any]) -> None:
        raise AssertionError("never run")


@pytest.mark.parametrize("handler", [_async_handler, _generator_handler, _AsyncCall()])
def test_a_handler_that_runs_later_is_refused_before_anything_starts(handler: Any) -> None:
    """Calling one runs none of its body: every event was acknowledged unprocessed
    (session 34's newcomer)."""
    with pytest.raises(InvalidArgument, match="async def or generator function"):
        Subscriber("jobs", "w1", handler=handler)


def test_a_handler_returning_a_coroutine_fails_its_event(cluster: Cluster) -> None:
    cluster.broker()
    handler = lambda event: _async_handler(event)  # noqa: E731 - a lambda is the mistake
    with (
        Subscriber("jobs", "s1", handler=handler, ns_port=cluster.ns_port, create=True),
        Publisher("jobs", "P", ns_port=cluster.ns_port) as pub,
    ):
        pub.publish([pub.event("work")])
        assert pub.wait(timeout_s=20)["dead_letters"] == 1
        (letter,) = pub.dead_letters()
    assert "TypeError: the handler returned a coroutine" in letter["error"]


def test_a_handler_may_stop_its_own_subscriber_and_the_rest_moves_on(cluster: Cluster) -> None:
    """stop() waits for the worker, which was the caller: it failed before unsubscribing,
    and the channel pushed the rest to the stopping member for good, another one idle
    (session 34's newcomer, 4 of 4)."""
    cluster.broker("jobs")
    handled: list[tuple[str, str]] = []
    quitter: list[Subscriber] = []

    def stops_at_third(event: dict[str, Any]) -> None:
        handled.append(("s1", event["payload"]))
        if len(handled) == 3:
            quitter[0].stop()

    s1 = Subscriber("jobs", "s1", handler=stops_at_third, ns_port=cluster.ns_port, prefetch=1)
    quitter.append(s1)
    with Publisher("jobs", "P", ns_port=cluster.ns_port) as pub:
        s1.start()
        pub.publish([pub.event(n, partition="one") for n in range(10)])
        wait_until(lambda: not subscriber_threads("s1"), what="s1 to stop itself")
        other = Subscriber(
            "jobs",
            "s2",
            handler=lambda ev: handled.append(("s2", ev["payload"])),
            ns_port=cluster.ns_port,
        )
        with other:
            done = pub.wait(timeout_s=20)
    assert done["outstanding"] == 0
    assert [payload for _, payload in handled] == list(range(10))
    assert [who for who, _ in handled] == ["s1"] * 3 + ["s2"] * 7
    assert s1.failure is None


def test_starting_a_running_subscriber_again_is_refused_and_leaves_no_thread(
    cluster: Cluster,
) -> None:
    cluster.broker()
    with Subscriber("jobs", "twice", handler=Worker(), ns_port=cluster.ns_port, create=True) as sub:
        running = set(subscriber_threads("twice"))
        with pytest.raises(InvalidArgument, match="twice is started already"):
            sub.start()
        assert set(subscriber_threads("twice")) == running
    wait_until(lambda: not subscriber_threads("twice"), what="its threads to end")


def test_a_payload_that_cannot_be_sent_is_refused_at_once_not_retried(cluster: Cluster) -> None:
    """What no retry can send is the caller's to fix: a typed refusal naming the event,
    not BrokerUnavailable after the whole retry window."""
    cluster.broker("jobs")
    with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None, retry_for_s=30) as pub:
        started = time.monotonic()
        with pytest.raises(InvalidEvent) as refused:
            pub.publish([pub.event("fine"), pub.event(object())])
        assert (refused.value.field, refused.value.index) == ("payload", 1)
        with pytest.raises(InvalidArgument, match=r"message too large.*fewer or smaller events"):
            pub.publish([pub.event(b"x" * (65 << 20))])
        assert time.monotonic() - started < 10, "refused at once, not retried for 30 s"
        assert pub.retries == 0
        assert pub.publish([pub.event("after")])["accepted"] == 1  # the connection is fine


def test_a_publisher_rides_out_a_restart_of_its_channel_s_broker(cluster: Cluster) -> None:
    """A Publisher idle while its broker restarts (an upgrade: SIGTERM, start again on the
    same data dir) found the channel unknown for a moment (the old broker's names gone,
    the new one's not yet there) and raised UnknownChannel at once, whatever
    ``retry_for_s`` said; and the library tried only once by default (session 36's
    newcomer)."""
    cluster.start("ns", ["-m", "channel_server", "nameserver", *cluster.ns], "ready at")
    broker = cluster.broker("jobs")  # (the name server stays: the channel is unknown)
    with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub:
        assert pub.publish([pub.event("before")])["accepted"] == 1
        broker.terminate()

        def restart_once_it_retries() -> None:
            wait_until(lambda: pub.retries >= 1, 20.0, "the publish retried")
            cluster.broker("jobs")

        restarter = threading.Thread(target=restart_once_it_retries)
        restarter.start()
        try:
            assert pub.publish([pub.event("after")])["accepted"] == 1
        finally:
            restarter.join(30.0)


def test_a_publisher_id_numbering_in_another_process_is_refused_not_repeated(
    cluster: Cluster,
) -> None:
    """Two processes publishing as one id (a web app's workers) read one sequence and gave
    events the same ids: the channel kept one of each, and the rest were reported as
    duplicates, never delivered (session 36's newcomer: 3 of 6 runs)."""
    cluster.broker("jobs")
    with Publisher("jobs", "P", ns_port=cluster.ns_port) as pub:  # the cluster's state dir
        assert pub.publish([pub.event("here")])["accepted"] == 1
        other = ["-m", "publisher", "publish", *cluster.ns, "--channel", "jobs", "--id", "P"]
        elsewhere = cluster.run([*other, "--count", "5"])
        assert elsewhere.returncode == 0, elsewhere.stderr  # it reserved the next numbers
        events = [pub.event(n) for n in range(RESERVE_AHEAD + 1)]  # past what it reserved
        with pytest.raises(InvalidArgument, match="numbering its events in another process"):
            pub.publish(events)
    assert channel_stats(cluster, "jobs")["duplicates"] == 0


def test_a_library_subscriber_keeps_its_processed_ids_in_its_state_dir(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``subscriber run --state-dir`` kept the window across restarts; the library's
    Subscriber could only through the CLI's own ProcessedIds (session 36's newcomer)."""
    cluster.broker("jobs")
    worker = Worker()
    with (
        Subscriber("jobs", "w1", handler=worker, ns_port=cluster.ns_port, state_dir=tmp_path),
        Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub,
    ):
        pub.publish([pub.event(n) for n in range(3)])
        pub.wait(timeout_s=20)
    kept = ProcessedIds(path=window_path(tmp_path, "jobs", None, "w1"))
    assert kept.known(["P/P-1", "P/P-2", "P/P-3"]) == {"P/P-1", "P/P-2", "P/P-3"}
    kept.close()


def test_publish_all_names_a_bad_event_by_its_place_in_the_input(cluster: Cluster) -> None:
    """It named the place in its batch ('event #10' for the input's 110th), and no id:
    the caller could not tell where to go on (session 34's newcomer)."""
    cluster.broker("jobs")
    with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub:
        events = [pub.event(n) for n in range(120)]
        events[110]["payload"] = object()
        with pytest.raises(InvalidEvent) as refused:
            pub.publish_all(iter(events), batch_size=50)
    assert (refused.value.field, refused.value.index) == ("payload", 110)
    assert f"event id {events[110]['id']!r}" in str(refused.value)


def test_a_close_from_another_thread_ends_a_wait(cluster: Cluster) -> None:
    """docs/api.md: close() may come from any thread; a wait in progress waited out its
    whole timeout (session 34's newcomer: 40 s)."""
    cluster.broker("jobs")
    pub = Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None)
    pub.publish([pub.event("nobody takes it")])
    closer = threading.Timer(0.5, pub.close)
    closer.start()
    started = time.monotonic()
    with pytest.raises(ValueError, match="is closed"):
        pub.wait(timeout_s=30)
    assert time.monotonic() - started < 10
    closer.join(5)


def test_a_publisher_belongs_to_the_thread_that_first_publishes(cluster: Cluster) -> None:
    """docs/api.md: made in one thread, used by another (one Publisher per thread)."""
    cluster.broker("jobs")
    with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub:
        results: list[Any] = []
        worker = threading.Thread(target=lambda: results.append(pub.publish([pub.event(1)])))
        worker.start()
        worker.join(10)
        assert [r["accepted"] for r in results] == [1]
        with pytest.raises(InvalidArgument, match="make one per thread") as refused:
            pub.publish([pub.event(2)])  # this thread's turn: the worker owns it now
        assert refused.value.argument == "thread"  # (Pyro5 said: 'not the owner of this proxy')


def test_a_publisher_made_before_a_fork_is_refused_in_the_child(cluster: Cluster) -> None:
    """The child shared the parent's connection and id sequence: calls crossed, and
    both numbered events alike (session 34's newcomer: 150 of 200 dropped)."""
    cluster.broker("jobs")
    with Publisher("jobs", "P", ns_port=cluster.ns_port, state_dir=None) as pub:
        assert pub.publish([pub.event("parent")])["accepted"] == 1
        child = os.fork()
        if child == 0:  # the child: says what it saw in its exit code, runs no test code
            code = 3
            try:
                pub.publish([{"id": "x", "publisher_id": "P", "partition": 0, "timestamp": 1.0}])
            except InvalidArgument as exc:
                code = 0 if "made before this process forked" in str(exc) else 4
            except BaseException:
                code = 5
            finally:
                pub.close()  # the parent's: nothing to give back here
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert pub.publish([pub.event("after")])["accepted"] == 1  # the parent's is whole


def test_topics_from_the_library_put_subscribe_and_get_in_order(
    cluster: Cluster, tmp_path: Path
) -> None:
    """docs/api.md's classic API: Putter.open and PullClient.open, no CLI."""
    cluster.broker()
    with PullClient.open("reader", ns_port=cluster.ns_port, state_dir=tmp_path / "r") as reader:
        reader.subscribe("news")  # creates the topic: puts before a subscriber are not kept
        with Putter.open("writer", ns_port=cluster.ns_port, state_dir=tmp_path / "w") as writer:
            lines = [writer.put("news", f"m{n}") for n in range(3)]
        assert all("stored on news" in line for line in lines), lines
        got = [reader.get("news") for _ in range(4)]
        assert [g["event"]["payload"] for g in got[:3]] == ["m0", "m1", "m2"]
        assert got[3]["status"] == "empty"
        assert [t["channel"] for t in reader.topics()] == ["news"]
        got_with = reader._remote("news")._proxy._pyroConnection
        assert type(got_with) is SpinningConnection  # gets wait awake where that pays
        assert reader.unsubscribe("news") is True


FULL_AFTER_PUBLISH = """
import resource, signal, sys
from publisher import Putter
from publisher.client import Publisher

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
stored = Publisher.publish


def publish_then_fill(self, events, *args, **kwargs):
    summary = stored(self, events, *args, **kwargs)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))  # the disk fills
    return summary


Publisher.publish = publish_then_fill
with Putter.open("writer", ns_port=int(sys.argv[1]), state_dir=sys.argv[2]) as writer:
    print(writer.put("news", "m0"))
"""


def test_a_put_stored_is_said_stored_when_its_journal_cannot_be_cleared(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The disk filled between the publish and clearing the put's journal: put raised
    StoreError for a message the topic had stored, so a retry stored it twice (session
    35's storage probe: 16 of 300 puts twice). A real write failure (RLIMIT_FSIZE), in a
    child process; the put left journaled is sent again under its own id, stored once."""
    cluster.broker()
    with PullClient.open("reader", ns_port=cluster.ns_port, state_dir=tmp_path / "r") as reader:
        reader.subscribe("news")
        child = cluster.run(["-c", FULL_AFTER_PUBLISH, str(cluster.ns_port), str(tmp_path / "w")])
        assert child.returncode == 0, child.stderr
        assert "stored on news" in child.stdout, child.stdout
        assert "its journal entry stays" in child.stderr
        with Putter.open("writer", ns_port=cluster.ns_port, state_dir=tmp_path / "w") as writer:
            assert "already stored" in (writer.resend_pending() or "")
        got = [reader.get("news") for _ in range(2)]
        assert [g.get("event", {}).get("payload") for g in got] == ["m0", None]


FULL_AT_GET = """
import resource, signal, sys
from pathlib import Path
from channel_server.errors import StoreError
from subscriber import PullClient

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
with PullClient.open("reader", ns_port=int(sys.argv[1]), state_dir=sys.argv[2]) as reader:
    print(reader.get("news")["event"]["payload"])
    (journal,) = Path(sys.argv[2]).rglob("*.received")
    resource.setrlimit(resource.RLIMIT_FSIZE, (journal.stat().st_size, resource.RLIM_INFINITY))
    try:
        reader.get("news")
    except StoreError as exc:
        print("refused:", exc.reason)
"""


def test_a_get_whose_journal_write_fails_is_got_again_by_the_next_client(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The journal line of a message a failed flush left in a buffer was written at
    close, and the next client's get acknowledged a message nobody showed: lost (session
    35's storage probe, 3 of 3). A real write failure (RLIMIT_FSIZE) in a child."""
    cluster.broker()
    with PullClient.open("reader", ns_port=cluster.ns_port, state_dir=tmp_path) as reader:
        reader.subscribe("news")
    with Putter.open("writer", ns_port=cluster.ns_port, state_dir=tmp_path / "w") as writer:
        for n in range(3):
            writer.put("news", f"m{n}")
    child = cluster.run(["-c", FULL_AT_GET, str(cluster.ns_port), str(tmp_path)])
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["m0", "refused: cannot write: File too large"]
    with PullClient.open("reader", ns_port=cluster.ns_port, state_dir=tmp_path) as reader:
        got = [reader.get("news") for _ in range(3)]
    assert [g.get("event", {}).get("payload") for g in got] == ["m1", "m2", None]


def test_a_bytes_payload_is_put_and_got_and_a_bad_one_refused(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Bytes are a payload (README): a put of them raised TypeError writing its journal,
    and a message of them stopped every get of its topic for good, the reader's journal
    unable to record it (session 34's newcomer)."""
    cluster.broker()
    with PullClient.open("reader", ns_port=cluster.ns_port, state_dir=tmp_path / "r") as reader:
        reader.subscribe("raw")
        with Putter.open("writer", ns_port=cluster.ns_port, state_dir=tmp_path / "w") as writer:
            for message in ("before", b"\x00raw", "after"):
                assert "stored on raw" in writer.put("raw", message)
            with pytest.raises(InvalidEvent) as refused:
                writer.put("raw", {1, 2})
            assert refused.value.field == "payload"
            assert "stored on raw" in writer.put("raw", b"\x01keyed", key="step-1")
        got = [reader.get("raw")["event"]["payload"] for _ in range(4)]
        assert got == ["before", b"\x00raw", "after", b"\x01keyed"]
        assert reader.get("raw")["status"] == "empty"


def two_workers_and_four_puts(a: PullClient, b: PullClient, port: int, tmp_path: Path) -> None:
    """Clients ``a`` and ``b`` in group ``workers`` of topic ``jobs``, messages m0..m3."""
    a.subscribe("jobs", group="workers")
    b.subscribe("jobs", group="workers")
    with Putter.open("writer", ns_port=port, state_dir=tmp_path / "w") as writer:
        for n in range(4):
            writer.put("jobs", f"m{n}")


def test_a_pull_client_leaving_its_group_does_not_leave_its_last_message_to_another(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Its unsubscribe acknowledged nothing: the message it had got went back to the
    group and another member got it again (session 34's newcomer, 2 of 2)."""
    cluster.broker()
    port = cluster.ns_port
    with (
        PullClient.open("a", ns_port=port, state_dir=tmp_path / "a") as a,
        PullClient.open("b", ns_port=port, state_dir=tmp_path / "b") as b,
    ):
        two_workers_and_four_puts(a, b, port, tmp_path)
        assert a.get("jobs", group="workers")["event"]["payload"] == "m0"
        assert a.unsubscribe("jobs", group="workers") is True
        got = [b.get("jobs", group="workers") for _ in range(4)]
    assert [g["event"]["payload"] for g in got[:3]] == ["m1", "m2", "m3"]
    assert got[3]["status"] == "empty"


def test_a_pull_client_closing_in_its_group_does_not_hold_its_last_message(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A close left the message it had got unacknowledged: the group's topic (one
    partition) waited the broker's --pull-timeout (60 s) for it, then another member got
    it again (session 36's newcomer, 2 of 2). Its subscription stays."""
    cluster.broker()
    port = cluster.ns_port
    with PullClient.open("b", ns_port=port, state_dir=tmp_path / "b") as b:
        with PullClient.open("a", ns_port=port, state_dir=tmp_path / "a") as a:
            two_workers_and_four_puts(a, b, port, tmp_path)
            assert a.get("jobs", group="workers")["event"]["payload"] == "m0"
        got = [b.get("jobs", group="workers") for _ in range(4)]
    assert [g["event"]["payload"] for g in got[:3]] == ["m1", "m2", "m3"]
    assert got[3]["status"] == "empty"
    with PullClient.open("a", ns_port=port, state_dir=tmp_path / "a") as again:
        assert again.get("jobs", group="workers")["status"] == "empty"  # still a member


def test_events_a_topic_did_not_keep_are_said_so_once(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Publisher(create=True) where a topic of that name is gets the topic: with no
    subscriber there, its events were not kept and nothing said so but a count
    (session 34's newcomer)."""
    cluster.broker()
    with PullClient.open("r", ns_port=cluster.ns_port, state_dir=tmp_path) as reader:
        reader.subscribe("news")
        reader.unsubscribe("news")  # a topic with no subscriber now
    with (
        caplog.at_level(logging.WARNING, logger="publisher.client"),
        Publisher("news", "P", ns_port=cluster.ns_port, create=True) as pub,
    ):
        first = pub.publish([pub.event("m1")])
        second = pub.publish([pub.event("m2")])
    assert (first["accepted"], first["unrouted"]) == (0, 1)
    assert "news is a topic and no subscriber was subscribed" in first["warning"]
    assert "warning" in second
    assert caplog.text.count("events were not kept") == 1  # logged once per Publisher


def test_topic_clients_over_many_topics_hold_a_bounded_number_of_connections(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Each kept a connection per topic it ever touched, for its whole life: a long-lived
    client used up its user's share, or the whole broker (session 34's soak)."""
    cluster.broker(extra=("--max-connections", "24"))
    port = cluster.ns_port
    with (
        PullClient.open("r", ns_port=port, state_dir=tmp_path / "r", attempts=1) as reader,
        Putter.open("w", ns_port=port, state_dir=tmp_path / "w", attempts=1) as writer,
    ):
        for n in range(30):
            reader.subscribe(f"t{n}")
            assert "stored on" in writer.put(f"t{n}", f"m{n}")
        assert [reader.get(f"t{n}")["event"]["payload"] for n in range(30)] == [
            f"m{n}" for n in range(30)
        ]
        for n in range(30):
            assert reader.unsubscribe(f"t{n}") is True


def test_topic_clients_told_not_to_spin_wait_for_their_replies_asleep(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.broker()
    with (
        PullClient.open("r", ns_port=cluster.ns_port, state_dir=tmp_path, reply_spin_s=0) as r,
        Putter.open("w", ns_port=cluster.ns_port, state_dir=tmp_path, reply_spin_s=0) as w,
    ):
        r.subscribe("news")
        w.put("news", "m0")
        assert r.get("news")["event"]["payload"] == "m0"
        got_with = r._remote("news")._proxy._pyroConnection
        put_with = w._publishers.get("news")._remote._proxy._pyroConnection
    assert type(got_with) is type(put_with) is SocketConnection


def test_a_subscriber_with_no_broker_says_what_to_start() -> None:
    port = free_port()
    sub = Subscriber("jobs", "w1", handler=Worker(), ns_port=port, connect_timeout_s=0.5)
    with pytest.raises(BrokerUnavailable) as gave_up:
        sub.start()
    assert "no broker answered in 0.5 s" in str(gave_up.value)
    assert f"name server at 127.0.0.1:{port}? (python -m channel_server serve)" in str(
        gave_up.value
    )
    assert not subscriber_threads("w1")
