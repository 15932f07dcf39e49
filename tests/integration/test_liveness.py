"""Slow work and frozen processes, with real processes: a long job is not a failure, a
frozen subscriber is declared dead and readmitted once it runs again."""

from __future__ import annotations

import collections
import signal
import time

import pytest

from tests.integration.conftest import channel_stats
from tests.integration.procs import Cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
JOB_S = 0.24
ACK_TIMEOUT_S = 1.0
"""A job takes 24 % of the ack timeout: the ratio of a 1.2 s job to the default 5 s."""


def members(cluster: Cluster, channel: str) -> dict[str, dict]:
    found = channel_stats(cluster, channel)["groups"]["default"]["members"]
    return {m["id"]: m for m in found}


def publish(cluster: Cluster, channel: str, count: int, partitions: int) -> None:
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", channel, "--id", "JOB"]
    argv += ["--count", str(count), "--partitions", str(partitions)]
    result = cluster.run(argv)
    assert result.returncode == 0, result.stderr


def test_long_jobs_finish_near_the_ideal_time_without_failures(cluster: Cluster) -> None:
    """200 jobs on 4 workers: within 10 % of 200 x JOB_S / 4, nobody inactive, none twice."""
    workers = ("w1", "w2", "w3", "w4")
    broker = cluster.broker("jobs", extra=("--ack-timeout", str(ACK_TIMEOUT_S)))
    for w in workers:
        cluster.subscriber("jobs", w, "--quiet", "--fault", f"slow:1:{JOB_S}")
    publish(cluster, "jobs", 200, 8)
    got = cluster.wait_for_records("jobs", workers, 200, timeout_s=60)
    # from the first job's start to the last one's end, on the workers' own clock (each
    # record is written as its job ends): not the publisher's start-up or this test's polls
    ends = [r["at"] for recs in got.values() for r in recs]
    elapsed = max(ends) - min(ends) + JOB_S
    ideal = 200 * JOB_S / len(workers)
    ran = collections.Counter(r["id"] for recs in got.values() for r in recs)
    assert len(ran) == 200 and set(ran.values()) == {1}, "a job ran twice"
    assert elapsed <= 1.1 * ideal, f"{elapsed:.2f} s for an ideal of {ideal:.2f} s"
    assert all(m["active"] and m["failures"] == 0 for m in members(cluster, "jobs").values())
    assert broker.count(r"marked inactive|delay from") == 0


def test_a_frozen_subscriber_is_declared_dead_then_readmitted(cluster: Cluster) -> None:
    broker = cluster.broker("frz", extra=("--ack-timeout", str(ACK_TIMEOUT_S)))
    cluster.subscriber("frz", "s1", "--quiet")
    frozen = cluster.subscriber("frz", "s2", "--prefetch", "1", "--fault", "slow:1:0.3")
    publish(cluster, "frz", 20, 2)
    cluster.wait_for_records("frz", ("s2",), 1)
    frozen.popen.send_signal(signal.SIGSTOP)
    try:
        broker.wait_for(r"frz: s2 marked inactive \(no answer to pings")
        got = cluster.wait_for_records("frz", ("s1", "s2"), 20)
        assert {r["id"] for recs in got.values() for r in recs} == {
            f"JOB-{i}" for i in range(1, 21)
        }
        assert members(cluster, "frz")["s2"]["active"] is False
    finally:
        frozen.popen.send_signal(signal.SIGCONT)
    thawed = time.monotonic()
    broker.wait_for(r"frz: s2 readmitted \(it was inactive: no answer to pings")
    frozen.wait_for(r"the channel dropped subscriber s2 \(.*\); subscribing again")
    assert time.monotonic() - thawed < 10
    wait_until(lambda: members(cluster, "frz")["s2"]["active"], what="s2 active again")


def test_a_subscriber_frozen_while_its_id_was_taken_over_handles_nothing_once_thawed(
    cluster: Cluster,
) -> None:
    """s1 is frozen with pushes on their way to it, and a new s1 takes its id over: the
    channel hands the frozen one's events to the new one. Thawed, the old process reads a
    push that timed out long ago, and holds events queued before the freeze: it must
    handle none of them (the new s1 did). It used to handle them all."""
    broker = cluster.broker("zmb", extra=("--ack-timeout", str(ACK_TIMEOUT_S)))
    old = cluster.subscriber("zmb", "s1", "--quiet", "--prefetch", "10")
    cluster.subscriber("zmb", "s2", "--quiet", "--prefetch", "10")
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "zmb", "--id", "P"]
    argv += ["--count", "600", "--partitions", "8", "--batch-size", "5", "--rate", "200"]
    publisher = cluster.start("publisher", argv, ready=None)
    cluster.wait_for_records("zmb", ("s1", "s2"), 100)
    old.popen.send_signal(signal.SIGSTOP)
    try:
        cluster.subscriber("zmb", "s1", "--quiet", "--prefetch", "10")  # the same id
        broker.wait_for(r"zmb: push of \d+ events? to s1 failed")  # it reached the frozen one
    finally:
        old.popen.send_signal(signal.SIGCONT)
    thawed = time.time()
    old.wait_for(r"subscribing again failed")  # it ran again, and learnt it is out
    assert publisher.popen.wait(60) == 0, publisher.output()
    got = cluster.wait_for_records("zmb", ("s1", "s2"), 600, timeout_s=30)
    assert old.terminate() == 0  # leaving, it must not unsubscribe the new s1's membership
    assert broker.count(r"zmb: s1 left group") == 0, broker.output()
    assert members(cluster, "zmb")["s1"]["active"]
    records = [r for recs in got.values() for r in recs]
    twice = [i for i, n in collections.Counter(r["id"] for r in records).items() if n > 1]
    assert not twice, f"handled twice: {sorted(twice)[:10]}"
    late = [r["id"] for r in records if r["pid"] == old.popen.pid and r["at"] >= thawed]
    assert not late, f"the thawed process handled {late[:10]}"


def test_a_push_on_its_way_when_the_id_was_taken_over_is_not_handled_by_the_old_process(
    cluster: Cluster,
) -> None:
    """s1 is frozen, holding nothing, when a push reaches it; a new s1 takes the id over
    (the push's events go to it) and the old one thaws while that push still waits for
    its answer (a long ack timeout). The broker cut the push's connection when the id
    moved (or sends nothing on it, if it was still connecting), so the old process
    handles none of it."""
    broker = cluster.broker("idl", extra=("--ack-timeout", "30"))
    old = cluster.subscriber("idl", "s1", "--quiet")
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "idl", "--id", "P"]
    assert cluster.run([*argv, "--count", "5"]).returncode == 0
    cluster.wait_for_records("idl", ("s1",), 5)  # the broker's link to it is open
    old.popen.send_signal(signal.SIGSTOP)
    try:
        assert cluster.run([*argv, "--count", "5"]).returncode == 0
        cluster.subscriber("idl", "s1", "--quiet")  # the id taken over after a ping
        broker.wait_for(r"idl: s1 resubscribed from")
    finally:
        old.popen.send_signal(signal.SIGCONT)
    thawed = time.time()
    got = cluster.wait_for_records("idl", ("s1",), 10)["s1"]
    old.wait_for(r"subscribing again failed")  # it ran again, and learnt it is out
    got = cluster.records("idl", "s1")["s1"]
    assert sorted(r["id"] for r in got) == sorted(f"P-{i}" for i in range(1, 11))
    assert not [r["id"] for r in got if r["pid"] == old.popen.pid and r["at"] >= thawed]
