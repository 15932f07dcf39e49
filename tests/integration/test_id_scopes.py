"""Id scopes (issue 13) with real processes: on a channel with ids unique per publisher
(the default) two publishers may use the same ids, and every event is processed exactly
once; on a channel with ids unique per channel the second publisher's are duplicates. The
scope is fixed at creation, survives a restart, and a store from before keeps the old rule.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from channel_client.lookup import broker_of_channel
from channel_server.errors import ChannelConflict, InvalidArgument
from channel_server.store.sqlite import DB_FILE
from channel_server.wire import make_proxy
from tests.integration.conftest import channel_stats
from tests.integration.procs import Cluster, Proc, wait_until
from tests.unit.test_sqlite_store_tx import V5_WINDOW

pytestmark = pytest.mark.integration
BASE_TS = 1_700_000_000.0
EVENTS = 30
PUBLISH_TIMEOUT_S = 60.0
SUBSCRIBERS = ("s1", "s2")


IDS = tuple(f"e{i}" for i in range(EVENTS))
"""The explicit ids every publisher of these tests uses."""


def write_events(path: Path, publisher_id: str, ids: tuple[str, ...]) -> None:
    """A batch file of ``publisher_id``'s events with these ids, over 3 partitions."""
    rows = [
        {
            "id": event_id,
            "publisher_id": publisher_id,
            "partition": i % 3,
            "timestamp": BASE_TS + i,
            "payload": f"{publisher_id} {i}",
        }
        for i, event_id in enumerate(ids)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def publish_argv(
    cluster: Cluster, channel: str, publisher_id: str, *flags: str, ids: tuple[str, ...] = IDS
) -> list[str]:
    """``publisher publish --file`` of ``publisher_id``'s events with explicit ``ids``."""
    path = cluster.tmp / f"{publisher_id}-{channel}.jsonl"
    write_events(path, publisher_id, ids)
    return [
        "-m",
        "publisher",
        "publish",
        *cluster.ns,
        "--channel",
        channel,
        "--id",
        publisher_id,
        "--file",
        str(path),
        "--spark",
        "never",
        "--no-progress",
        "--batch-size",
        "5",
        "--json",
        *flags,
    ]


def figures(proc: Proc) -> dict:
    """The JSON figures a finished publisher process printed last."""
    assert proc.popen.wait(PUBLISH_TIMEOUT_S) == 0, proc.output()
    proc.kill()  # reaped: its output is all read
    return json.loads(proc.lines[-1])


def publish(
    cluster: Cluster, channel: str, publisher_id: str, *flags: str, ids: tuple[str, ...] = IDS
) -> dict:
    """Publish to the end; returns the figures (accepted, duplicates ...)."""
    argv = publish_argv(cluster, channel, publisher_id, *flags, ids=ids)
    result = cluster.run(argv, PUBLISH_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def processed(cluster: Cluster, channel: str) -> Counter[tuple[str, str]]:
    """How many times each (publisher, id) reached a handler."""
    records = cluster.records(channel, *SUBSCRIBERS).values()
    return Counter((r["publisher_id"], r["id"]) for recs in records for r in recs)


def settled(cluster: Cluster, channel: str, events: int) -> Counter[tuple[str, str]]:
    """Once every event is acknowledged (records are flushed before their acks), what
    was processed; nothing is in flight any more, so nothing more can come."""
    wait_until(
        lambda: (s := channel_stats(cluster, channel))["unacked"] == 0 and s["acked"] == events,
        20.0,
        f"{events} events acknowledged on {channel}",
    )
    return processed(cluster, channel)


def test_two_publishers_with_the_same_ids_are_each_processed_exactly_once(
    cluster: Cluster,
) -> None:
    # Given a channel created with the broker's default scope, and two subscribers
    cluster.broker("shared")
    for sub_id in SUBSCRIBERS:
        cluster.subscriber("shared", sub_id, "--prefetch", "4")
    # When two publisher processes publish the same explicit ids at the same time
    procs = [
        cluster.start(f"pub-{p}", publish_argv(cluster, "shared", p), ready=None) for p in "AB"
    ]
    reports = [figures(proc) for proc in procs]
    # Then neither blocked the other: all accepted, and each event processed exactly once
    assert [(r["accepted"], r["duplicates"]) for r in reports] == [(EVENTS, 0), (EVENTS, 0)]
    counts = settled(cluster, "shared", 2 * EVENTS)
    assert counts == Counter({(p, i): 1 for p in "AB" for i in IDS})
    assert channel_stats(cluster, "shared")["ids"] == "publisher"
    # And publishing them again is reported as duplicates, per publisher
    assert publish(cluster, "shared", "B")["duplicates"] == EVENTS


def test_on_a_channel_wide_channel_the_second_publishers_ids_are_duplicates(
    cluster: Cluster,
) -> None:
    # Given a broker whose new channels have ids unique per channel
    cluster.broker("wide", extra=("--ids", "channel"))
    for sub_id in SUBSCRIBERS:
        cluster.subscriber("wide", sub_id)
    # When A publishes, then B publishes the same ids
    first = publish(cluster, "wide", "A")
    second = publish(cluster, "wide", "B")
    # Then B's are reported as duplicates and not stored: only A's are processed
    assert (first["accepted"], first["duplicates"]) == (EVENTS, 0)
    assert (second["accepted"], second["duplicates"]) == (0, EVENTS)
    counts = settled(cluster, "wide", EVENTS)
    assert counts == Counter({("A", i): 1 for i in IDS})
    status = cluster.run(["-m", "channel_server", "status", "wide", *cluster.ns])
    assert status.returncode == 0, status.stderr
    assert "wide (queue, ids unique per channel)" in status.stdout


def test_the_scope_is_fixed_at_creation_and_a_conflict_is_refused(cluster: Cluster) -> None:
    cluster.broker(extra=("--ids", "channel"))
    # --create --ids publisher on a broker whose default is channel-wide: per publisher
    assert publish(cluster, "mine", "A", "--create", "--ids", "publisher")["accepted"] == EVENTS
    assert publish(cluster, "mine", "B")["accepted"] == EVENTS
    assert channel_stats(cluster, "mine")["ids"] == "publisher"
    # Asking for the other scope of an existing channel is refused in one line
    refused = cluster.run(publish_argv(cluster, "mine", "C", "--ids", "channel"))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "error: channel 'mine' exists with ids 'publisher', not 'channel' "
        "(fixed when it was created)"
    )
    # The broker itself: the same scope (or none) is the channel's URI, another a refusal
    with make_proxy(broker_of_channel("127.0.0.1", cluster.ns_port, "mine"), 5.0) as broker:
        uri = broker.create_channel("mine", "queue", "publisher")
        assert broker.create_channel("mine") == uri
        with pytest.raises(ChannelConflict) as conflict:
            broker.create_channel("mine", "queue", "channel")
        assert (conflict.value.existing, conflict.value.requested) == ("publisher", "channel")
        with pytest.raises(InvalidArgument, match="id_scope: must be one of publisher, channel"):
            broker.create_channel("other", "queue", "global")


def kill(proc: Proc) -> None:
    proc.popen.send_signal(signal.SIGKILL)
    proc.popen.wait(10)


def test_a_restarted_broker_keeps_the_scope_and_the_window(cluster: Cluster) -> None:
    # Given a channel-wide channel whose ids A published, all acknowledged (their ids
    # are kept in the window only)
    broker = cluster.broker("kept", extra=("--ids", "channel"))
    cluster.subscriber("kept", "s1")
    assert publish(cluster, "kept", "A")["accepted"] == EVENTS
    settled(cluster, "kept", EVENTS)
    # When the broker is killed and started again with the new default scope
    kill(broker)
    broker = cluster.broker("kept", name="broker")
    broker.wait_for(r"channel kept keeps ids unique per channel, as it was created")
    # Then the channel kept its scope and its window: B's same ids are duplicates
    assert channel_stats(cluster, "kept")["ids"] == "channel"
    assert publish(cluster, "kept", "B")["duplicates"] == EVENTS
    # And a new channel of this broker has ids unique per publisher, kept over a restart too
    assert publish(cluster, "fresh", "A", "--create")["accepted"] == EVENTS
    kill(broker)
    cluster.broker(name="broker")
    assert channel_stats(cluster, "fresh")["ids"] == "publisher"
    assert publish(cluster, "fresh", "A")["duplicates"] == EVENTS
    assert publish(cluster, "fresh", "B")["accepted"] == EVENTS


def test_a_store_from_before_id_scopes_keeps_channel_wide_ids(cluster: Cluster) -> None:
    # Given a data directory written by a broker of store schema 5 (channel c: id "a"
    # acknowledged, "b" of publisher "pub" still queued)
    data = cluster.data_dir("broker")
    data.mkdir(mode=0o700)
    with sqlite3.connect(data / DB_FILE) as db:
        db.executescript(V5_WINDOW)
    # When the new broker starts on it
    cluster.broker()
    # Then the channel keeps ids unique per channel: another publisher's "a" (kept in the
    # old window) and "b" (still queued) are duplicates, while a new id is not
    assert channel_stats(cluster, "c")["ids"] == "channel"
    report = publish(cluster, "c", "other", ids=("a", "b", "new"))
    assert (report["accepted"], report["duplicates"]) == (1, 2)
    # And a channel created now has ids unique per publisher
    assert publish(cluster, "c2", "other", "--create", ids=("a",))["accepted"] == 1
    assert channel_stats(cluster, "c2")["ids"] == "publisher"


def test_dead_letters_are_named_by_uid_or_by_id(cluster: Cluster) -> None:
    # Given two publishers' events "e1", whose handler always fails
    cluster.broker("dl")
    cluster.subscriber("dl", "s1", "--fault", "fail-on:e1")
    for publisher_id in "AB":
        assert publish(cluster, "dl", publisher_id, ids=("e0", "e1"))["accepted"] == 2
    wait_until(lambda: channel_stats(cluster, "dl")["dead_letters"] == 2, what="2 dead letters")

    def dead_letters(*ids: str, replay: bool = False) -> str:
        flags = [arg for i in ids for arg in ("--id", i)] + (["--replay"] if replay else ["--json"])
        result = cluster.run(["-m", "channel_server", "dead-letters", "dl", *cluster.ns, *flags])
        assert result.returncode == 0, result.stderr
        return result.stdout

    def listed(*ids: str) -> list[tuple[str, str]]:
        return sorted((d["publisher_id"], d["id"]) for d in json.loads(dead_letters(*ids)))

    # Then a uid names one of them, an id every publisher's
    assert listed("A/e1") == [("A", "e1")]
    assert listed("e1") == [("A", "e1"), ("B", "e1")]
    assert "dl: 1 dead letters queued again" in dead_letters("B/e1", replay=True)
