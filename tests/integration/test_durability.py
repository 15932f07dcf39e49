"""Scenarios A11, A12, A21 (docs/scenarios.md) and the store's start-up checks: the backup
queue at work."""

from __future__ import annotations

import json
import signal

import pytest

from channel_server.errors import StoreError
from channel_server.store.sqlite import SQLiteStore
from subscriber import Subscriber
from tests.integration.conftest import channel_stats, publisher_for
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration
FAULTS = ("--allow-fault-injection",)


def publish_cli(cluster: Cluster, channel: str, *flags: str):
    return cluster.run(
        [
            "-m",
            "publisher",
            "publish",
            *cluster.ns,
            "--channel",
            channel,
            "--id",
            "PUB",
            "--json",
            *flags,
        ]
    )


def seqs(records: list[dict]) -> list[int]:
    return [int(r["id"].split("-")[1]) for r in records]


def test_a11_kill_queues_rebuilds_from_the_backup(cluster: Cluster) -> None:
    broker = cluster.broker("a11", extra=FAULTS)
    result = publish_cli(
        cluster, "a11", "--count", "10", "--batch-size", "1", "--kill-queues-at", "5"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["accepted"] == 10
    broker.wait_for(r"a11: fault kill_queues fired: 5 queued events dropped")
    broker.wait_for(r"a11: the queues lost 5 events .*publishing halted")
    broker.wait_for(r"a11: rebuilt 5 events in timestamp order; publishing resumed")
    stats = channel_stats(cluster, "a11")
    assert (stats["unacked"], stats["stored"]) == (10, 10)
    cluster.subscriber("a11", "s1")
    got = cluster.wait_for_records("a11", ("s1",), 10)["s1"]
    assert seqs(got) == list(range(1, 11))
    wait_until(lambda: channel_stats(cluster, "a11")["stored"] == 0, what="backup emptied")


def test_a12_after_processing_the_backup_holds_only_the_unacknowledged(
    cluster: Cluster,
) -> None:
    broker = cluster.broker("a12", extra=FAULTS)
    cluster.subscriber("a12", "s1", "--prefetch", "1", "--fault", "delay:1:0.05")
    result = publish_cli(
        cluster, "a12", "--count", "10", "--batch-size", "1", "--kill-queues-at", "5"
    )
    assert result.returncode == 0, result.stderr
    broker.wait_for(r"a12: fault kill_queues fired")
    got = cluster.wait_for_records("a12", ("s1",), 10)["s1"]
    assert seqs(got) == list(range(1, 11))
    wait_until(lambda: channel_stats(cluster, "a12")["stored"] == 0, what="backup emptied")
    stats = channel_stats(cluster, "a12")
    assert (stats["unacked"], stats["acked"]) == (0, 10)


def test_kill_queues_is_refused_without_fault_injection(cluster: Cluster) -> None:
    cluster.broker("safe")
    result = publish_cli(
        cluster, "safe", "--count", "3", "--batch-size", "1", "--kill-queues-at", "1"
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: kill_queues refused: the broker was not started with --allow-fault-injection"
    )


def restart(cluster: Cluster, old, *channels: str):
    old.popen.send_signal(signal.SIGKILL)
    old.popen.wait(10)
    return cluster.broker(*channels, name="broker")


def test_a_killed_broker_restores_events_and_members(cluster: Cluster) -> None:
    broker = cluster.broker("keep")
    with publisher_for(cluster, "keep") as pub:
        pub.publish([pub.event(i, partition=i % 2) for i in range(6)])
    broker = restart(cluster, broker)
    broker.wait_for(r"keep: restored 6 unacknowledged events, 0 members")
    assert channel_stats(cluster, "keep")["unacked"] == 6
    with publisher_for(cluster, "keep", next_seq=1) as pub:  # the window survived too
        assert len(pub.publish([pub.event(0, partition=0)])["duplicates"]) == 1
    cluster.subscriber("keep", "s1")
    assert len(cluster.wait_for_records("keep", ("s1",), 6)["s1"]) == 6


def test_a21_sigkill_mid_stream_every_event_processed_exactly_once(cluster: Cluster) -> None:
    broker = cluster.broker("a21")
    cluster.subscriber("a21", "s1", "--quiet")
    cluster.subscriber("a21", "s2", "--quiet")
    total = 3000
    publisher = cluster.start(
        "publisher",
        [
            "-m",
            "publisher",
            "publish",
            *cluster.ns,
            "--channel",
            "a21",
            "--id",
            "PUB",
            "--count",
            str(total),
            "--partitions",
            "4",
            "--batch-size",
            "1",
            "--retry-for",
            "60",
            "--json",
        ],
        ready=None,
    )
    wait_until(lambda: channel_stats(cluster, "a21")["acked"] >= 300, what="stream running")
    restart(cluster, broker, "a21")
    assert publisher.popen.wait(90) == 0, publisher.output()
    figures = json.loads(publisher.output().splitlines()[-1])
    assert figures["accepted"] + figures["duplicates"] == total
    assert figures["refused"] == 0
    got = cluster.wait_for_records("a21", ("s1", "s2"), total, timeout_s=60)
    everything = seqs(got["s1"]) + seqs(got["s2"])
    assert sorted(everything) == list(range(1, total + 1))  # each exactly once
    for records in got.values():
        for partition in range(4):
            mine = [s for s in seqs(records) if s % 4 == partition]
            assert mine == sorted(mine)
    wait_until(lambda: channel_stats(cluster, "a21")["stored"] == 0, what="backup emptied")


def test_a_damaged_database_is_a_clear_start_up_error(cluster: Cluster) -> None:
    data = cluster.data_dir("torn")
    data.mkdir(mode=0o700)
    (data / "channels.sqlite").write_bytes(b"this is not a database" * 100)
    (data / "channels.sqlite").chmod(0o600)  # private already: no warning to tighten it
    result = cluster.run(["-m", "channel_server", "serve", *cluster.ns, "--data-dir", str(data)])
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot be opened" in lines[0]
    assert "move it away" in lines[0]


FULL_DISK_SERVE = """
import resource, runpy, sys
limit = int(sys.argv[1])  # the bytes any file may have: no file grows past it
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
sys.argv = ["channel_server", *sys.argv[2:]]
runpy.run_module("channel_server", run_name="__main__")
"""


def test_a_store_that_cannot_grow_is_not_called_damaged(cluster: Cluster) -> None:
    """A healthy store on a full disk was "cannot be opened (disk I/O error); it may be
    damaged ... move it away to start empty": following that advice threw every event
    away (session 35's storage probe). A real write failure: the file size limit."""
    data = cluster.data_dir("full")
    SQLiteStore(data).close()  # a healthy store, with no -wal or -shm file yet
    serve = ["serve", *cluster.ns, "--data-dir", str(data)]
    result = cluster.run(["-c", FULL_DISK_SERVE, "64", *serve])
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "nothing says the database is damaged" in lines[0]
    assert "do not move it away" in lines[0]
    fresh = ["serve", *cluster.ns, "--data-dir", str(cluster.data_dir("fresh"))]
    result = cluster.run(["-c", FULL_DISK_SERVE, "0", *fresh])  # not even the lock file
    assert result.returncode == 3
    assert "broker.lock: cannot write:" in result.stderr.strip().splitlines()[-1]


def test_publishes_the_store_cannot_write_are_logged_by_the_broker(cluster: Cluster) -> None:
    """Every publish was refused with a StoreError (a full disk, a data dir gone) and the
    broker's log said nothing: the operator learned of it only from the clients
    (session 35's storage probe). Files may not grow past 256 KiB here."""
    limited = ["-c", FULL_DISK_SERVE, str(256 << 10), "serve", *cluster.ns]
    argv = [*limited, "--data-dir", str(cluster.data_dir("full")), "--channel", "jobs"]
    broker = cluster.start("broker", argv, r"broker \S+ ready at")
    with publisher_for(cluster, "jobs", retry_for_s=0.0) as pub:
        big = [pub.event("x" * 10_000) for _ in range(100)]  # 1 MB: past the limit
        with pytest.raises(StoreError, match="journal write failed"):
            pub.publish(big)
        assert pub.publish([pub.event("small")])["accepted"] == 1  # room for that
    broker.wait_for(r"ERROR .*jobs: publish refused: store .*journal write failed")


def test_a_wal_removed_under_the_broker_stops_publishes_and_loses_nothing(
    cluster: Cluster,
) -> None:
    """The -wal file deleted under a running broker: SQLite committed into a file no name
    leads to, the store deleted the journal segments of those rows, and a SIGKILL lost
    them, with nothing logged (session 35's storage probe: up to 1,440 events)."""
    broker = cluster.broker("jobs")
    accepted: list[str] = []
    with publisher_for(cluster, "jobs", retry_for_s=0.0) as pub:
        batch = [pub.event(n) for n in range(50)]
        assert pub.publish(batch)["accepted"] == 50
        accepted += [ev["id"] for ev in batch]
        for suffix in ("-wal", "-shm"):
            (cluster.data_dir("broker") / f"channels.sqlite{suffix}").unlink()

        def refused() -> bool:
            batch = [pub.event(n) for n in range(10)]
            try:
                pub.publish(batch)
            except StoreError as exc:
                return "removed under the broker" in str(exc)
            accepted.extend(ev["id"] for ev in batch)
            return False

        wait_until(refused, 15.0, "publishes refused")
    broker.wait_for(r"CRITICAL .*channels.sqlite-wal was removed under the broker")
    broker.kill()
    cluster.broker("jobs")
    cluster.subscriber("jobs", "s1")
    got = cluster.wait_for_records("jobs", ("s1",), len(accepted))["s1"]
    assert sorted(r["id"] for r in got) == sorted(accepted)


def test_a_data_dir_in_use_is_refused(cluster: Cluster) -> None:
    cluster.broker("x")
    other_ns = ["--ns-port", str(cluster.ns_port + 1)]
    result = cluster.run(
        ["-m", "channel_server", "serve", *other_ns, "--data-dir", str(cluster.data_dir("broker"))]
    )
    assert result.returncode == 3
    assert "in use by another broker (pid" in result.stderr.strip().splitlines()[-1]


def test_a_cold_backlog_comes_back_after_sigkill_with_every_payload(cluster: Cluster) -> None:
    # Given a broker that keeps no payload in memory, holding a backlog of 300 events
    cold = ("--payload-memory", "0")
    broker = cluster.broker("cold", extra=cold)
    sent = {f"PUB-{n + 1}": {"n": n, "blob": "x" * n} for n in range(300)}
    with publisher_for(cluster, "cold", partitions=3) as pub:
        assert pub.publish([pub.event(p) for p in sent.values()])["accepted"] == 300
    assert channel_stats(cluster, "cold")["queued_cold"] == 300
    # When it is SIGKILLed and started again, and a subscriber drains the backlog
    broker.popen.send_signal(signal.SIGKILL)
    broker.popen.wait(10)
    cluster.broker("cold", extra=cold, name="broker")
    got: list[dict] = []
    subscriber = Subscriber("cold", "w1", handler=got.append, ns_port=cluster.ns_port)
    with subscriber, publisher_for(cluster, "cold", next_seq=301) as pub:
        assert pub.wait(timeout_s=30)["outstanding"] == 0
    # Then every event came once with its payload, read back from the store, in order
    assert {ev["id"]: ev["payload"] for ev in got} == sent and len(got) == 300
    for partition in range(3):
        offsets = [ev["offset"] for ev in got if ev["partition"] == partition]
        assert offsets == sorted(offsets)
    stats = channel_stats(cluster, "cold")
    assert stats["read_back"] >= 300 and stats["unacked"] == 0
