"""Brokers sharing one PostgreSQL database: a channel is served by the holder of its lease,
and when that broker dies or freezes another takes the channel over (README "Running on
several machines"). Judged like the randomized fault suite: nothing lost, order per
partition kept, a duplicate only within what the dead owner had delivered."""

from __future__ import annotations

import shutil
import signal
import time

import psycopg
import pytest

from tests.chaos.harness import read_records
from tests.integration.procs import Cluster, Proc, ShiftedClock, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
LEASE_S = 1.5
TAKE_OVER_S = 3 * LEASE_S + 10.0
"""A lease's term, the standby's round, the restore, and a loaded 2-core machine."""
EVENTS = 400
PREFETCH = 100
"""The subscribers' default prefetch: what one may hold unacknowledged."""
PUSH_THREADS = 4
"""The broker's default dispatch pool (``push_threads``)."""
FROZEN_TERMS = 6
"""Lease terms the subscribers stay frozen in the frozen-subscribers test."""


def pg_broker(
    cluster: Cluster, dsn: str, name: str, *channels: str, env: dict[str, str] | None = None
) -> Proc:
    extra = ("--store", dsn, "--lease", str(LEASE_S), "--broker-id", name)
    return cluster.broker(*channels, extra=extra, name=name, env=env)


def lease_of(dsn: str, channel: str) -> tuple[str, int] | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT owner, epoch FROM channel_leases WHERE channel = %s AND expires_at > now()",
            (channel,),
        ).fetchone()
    return None if row is None else (row[0], row[1])


def publish(cluster: Cluster, channel: str, rate: float) -> Proc:
    argv = [
        "-m", "publisher", "publish", *cluster.ns, "--channel", channel, "--id", "P",
        "--count", str(EVENTS), "--partitions", "4", "--batch-size", "5",
        "--rate", str(rate), "--retry-for", "60", "--json",
    ]  # fmt: skip
    return cluster.start("publisher", argv, ready=None)


def received(cluster: Cluster, channel: str, *subs: str) -> list[dict]:
    return [r for s in subs for r in read_records(cluster.record_path(channel, s))]


def wait_for_every_event(
    cluster: Cluster, channel: str, what: str, subs: tuple[str, ...] = ("s1", "s2")
) -> None:
    """Every event handled by one of ``subs`` within a minute; else a failure naming the
    missing."""
    expected = {f"P-{i}" for i in range(1, EVENTS + 1)}
    try:
        wait_until(
            lambda: expected <= {r["id"] for r in received(cluster, channel, *subs)},
            60,
            what,
        )
    except AssertionError as exc:
        missing = expected - {r["id"] for r in received(cluster, channel, *subs)}
        first = sorted(missing, key=lambda i: int(i.split("-")[1]))[:20]
        raise AssertionError(f"{exc}: {len(missing)} missing, first {first}") from None


def assert_all_once_in_order(records: list[dict], allowed_duplicates: int) -> None:
    ids = [r["id"] for r in records]
    assert {f"P-{i}" for i in range(1, EVENTS + 1)} <= set(ids), "events lost"
    assert len(ids) - len(set(ids)) <= allowed_duplicates, "more duplicates than in flight"
    firsts: dict[str, dict] = {}
    for r in sorted(records, key=lambda r: r["at"]):
        firsts.setdefault(r["id"], r)
    by_partition: dict[str, list[int]] = {}
    for r in sorted(firsts.values(), key=lambda r: r["at"]):
        by_partition.setdefault(str(r["partition"]), []).append(int(r["id"].split("-")[1]))
    for partition, seqs in by_partition.items():
        assert seqs == sorted(seqs), f"partition {partition} reordered"


def test_one_broker_keeps_its_lease_for_many_terms(cluster: Cluster, pg_dsn: str) -> None:
    pg_broker(cluster, pg_dsn, "b1", "keep")
    started = time.monotonic()
    wait_until(
        lambda: time.monotonic() - started > 4 * LEASE_S and lease_of(pg_dsn, "keep"),
        4 * LEASE_S + 10,
        "four lease terms with the lease still held",
    )
    assert lease_of(pg_dsn, "keep") == ("b1", 1)
    cluster.subscriber("keep", "s1")
    done = publish(cluster, "keep", rate=400.0)
    assert done.popen.wait(60) == 0, done.output()
    wait_until(lambda: len(received(cluster, "keep", "s1")) >= EVENTS, 30, "every event")
    assert_all_once_in_order(received(cluster, "keep", "s1"), 0)


@pytest.mark.parametrize("fault", ["kill", "freeze", "stop"])
def test_a_standby_takes_over_when_the_owner_dies_freezes_or_stops(
    cluster: Cluster, pg_dsn: str, fault: str
) -> None:
    cluster.start("ns", ["-m", "channel_server", "nameserver", *cluster.ns], "ready at")
    owner = pg_broker(cluster, pg_dsn, "b1", "fo")
    standby = pg_broker(cluster, pg_dsn, "b2")
    assert lease_of(pg_dsn, "fo") == ("b1", 1)
    for sub in ("s1", "s2"):
        cluster.subscriber("fo", sub)
    pub = publish(cluster, "fo", rate=100.0)
    wait_until(lambda: len(received(cluster, "fo", "s1", "s2")) >= EVENTS // 4, 30, "flowing")
    signals = {"kill": signal.SIGKILL, "freeze": signal.SIGSTOP, "stop": signal.SIGTERM}
    owner.popen.send_signal(signals[fault])
    # a clean stop releases the lease (no owner), the others leave it to expire
    standby.wait_for(r"taking over channel fo from (b1|-)", TAKE_OVER_S)
    wait_until(lambda: lease_of(pg_dsn, "fo") == ("b2", 2), TAKE_OVER_S, "b2 holds the lease")
    if fault == "freeze":
        owner.popen.send_signal(signal.SIGCONT)
        owner.wait_for(r"channel fo: no longer served here", TAKE_OVER_S)
    assert pub.popen.wait(90) == 0, pub.output()
    wait_for_every_event(cluster, "fo", "every event after the take-over")
    # a duplicate only of what the old owner had pushed and not seen acknowledged: at
    # most a prefetch window per subscriber
    assert_all_once_in_order(received(cluster, "fo", "s1", "s2"), 2 * PREFETCH)


def test_a_standby_whose_clock_is_behind_takes_over_with_newer_sessions(
    cluster: Cluster, pg_dsn: str
) -> None:
    """Its sessions start past the owner's claim (Store.claim_sessions): from its clock,
    they would have been older than the owner's, and both subscribers, which saw those,
    would have refused every push of the new owner."""
    cluster.start("ns", ["-m", "channel_server", "nameserver", *cluster.ns], "ready at")
    owner = pg_broker(cluster, pg_dsn, "b1", "sk")
    behind = ShiftedClock(cluster.tmp)
    behind.step(-250.0)  # its machine's clock four minutes behind the owner's
    standby = pg_broker(cluster, pg_dsn, "b2", env=behind.env)
    for sub in ("s1", "s2"):
        cluster.subscriber("sk", sub)
    pub = publish(cluster, "sk", rate=100.0)
    wait_until(lambda: len(received(cluster, "sk", "s1", "s2")) >= EVENTS // 4, 30, "flowing")
    owner.popen.send_signal(signal.SIGKILL)
    standby.wait_for(r"taking over channel sk from b1", TAKE_OVER_S)
    assert pub.popen.wait(90) == 0, pub.output()
    wait_for_every_event(cluster, "sk", "every event after the take-over")
    assert_all_once_in_order(received(cluster, "sk", "s1", "s2"), 2 * PREFETCH)


def test_frozen_subscribers_do_not_cost_the_owner_its_lease(cluster: Cluster, pg_dsn: str) -> None:
    """More frozen subscribers than push threads: each push to one holds a pool thread
    for the ack timeout, longer than a lease term. The lease rounds have a thread of their
    own, so the owner keeps the channel (no take-over: the epoch stays 1); once thawed,
    the subscribers get every event."""
    subs = tuple(f"s{i}" for i in range(PUSH_THREADS + 2))
    cluster.start("ns", ["-m", "channel_server", "nameserver", *cluster.ns], "ready at")
    pg_broker(cluster, pg_dsn, "b1", "fz")
    standby = pg_broker(cluster, pg_dsn, "b2")
    frozen = [cluster.subscriber("fz", sub) for sub in subs]
    pub = publish(cluster, "fz", rate=200.0)
    wait_until(lambda: len(received(cluster, "fz", *subs)) >= EVENTS // 8, 30, "flowing")
    for proc in frozen:
        proc.popen.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        wait_until(
            lambda: time.monotonic() - started > FROZEN_TERMS * LEASE_S,
            FROZEN_TERMS * LEASE_S + 10,
            f"{FROZEN_TERMS} lease terms with every subscriber frozen",
        )
        assert lease_of(pg_dsn, "fz") == ("b1", 1), standby.output()
    finally:
        for proc in frozen:
            proc.popen.send_signal(signal.SIGCONT)
    assert standby.count("taking over channel fz") == 0, standby.output()
    assert pub.popen.wait(90) == 0, pub.output()
    wait_for_every_event(cluster, "fz", "every event after the thaw", subs)
    assert_all_once_in_order(received(cluster, "fz", *subs), len(subs) * PREFETCH)


def admin(cluster: Cluster, *argv: str) -> str:
    done = cluster.run(["-m", "channel_server", *argv, *cluster.ns])
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_move_hands_a_channel_over_mid_flow(cluster: Cluster, pg_dsn: str) -> None:
    cluster.start("ns", ["-m", "channel_server", "nameserver", *cluster.ns], "ready at")
    pg_broker(cluster, pg_dsn, "b1", "mv")
    target = pg_broker(cluster, pg_dsn, "b2")
    for sub in ("s1", "s2"):
        cluster.subscriber("mv", sub)
    pub = publish(cluster, "mv", rate=100.0)
    wait_until(lambda: len(received(cluster, "mv", "s1", "s2")) >= EVENTS // 4, 30, "flowing")
    assert "moved mv: b1 -> b2" in admin(cluster, "move", "mv", "--to", "b2")
    target.wait_for(r"channel mv \(queue", TAKE_OVER_S)
    assert target.count("taking channel mv handed over to this broker") == 1
    assert target.count("WARNING .*taking over channel mv") == 0  # not a failover
    assert lease_of(pg_dsn, "mv") == ("b2", 2)
    assert pub.popen.wait(90) == 0, pub.output()
    wait_for_every_event(cluster, "mv", "every event after the move")
    assert_all_once_in_order(received(cluster, "mv", "s1", "s2"), 2 * PREFETCH)
    again = cluster.run(["-m", "channel_server", "move", "mv", "--to", "b2", *cluster.ns])
    assert again.returncode == 4  # it said "no other broker 'b2'" (session 33's operator)
    assert "channel 'mv' is served by broker 'b2' already" in again.stderr


def test_rebalance_spreads_channels_over_the_brokers(cluster: Cluster, pg_dsn: str) -> None:
    cluster.start("ns", ["-m", "channel_server", "nameserver", *cluster.ns], "ready at")
    pg_broker(cluster, pg_dsn, "b1", "r1", "r2", "r3", "r4")
    pg_broker(cluster, pg_dsn, "b2")
    assert "would move" in admin(cluster, "rebalance", "--dry-run")
    out = admin(cluster, "rebalance")
    assert out.count("moved ") == 2, out
    with psycopg.connect(pg_dsn) as conn:
        owners = dict(conn.execute("SELECT channel, owner FROM channel_leases").fetchall())
    assert sorted(owners.values()) == ["b1", "b1", "b2", "b2"]
    assert "balanced: 4 channels over 2 brokers" in admin(cluster, "rebalance")


def test_a_lone_broker_serves_its_channels_again_after_the_database_was_away(
    cluster: Cluster,
) -> None:
    """The database stopped for longer than a lease term: the broker dropped its channel,
    and with no other broker to take it, never served it again (session 32's Jepsen
    probe). Once the lease has expired in the database, it takes it back."""
    from tests.pgcluster import start_cluster

    pg = start_cluster()  # its own: this one stops and starts again
    try:
        dsn = pg.create_database("lone")
        broker = pg_broker(cluster, dsn, "b1", "back")
        pg.stop()
        broker.wait_for(r"channel back: no longer served here", TAKE_OVER_S)
        pg.launch()
        broker.wait_for(r"taking over channel back from b1", TAKE_OVER_S)
        wait_until(lambda: lease_of(dsn, "back") == ("b1", 1), TAKE_OVER_S, "b1 holds it again")
        cluster.subscriber("back", "s1")
        done = publish(cluster, "back", rate=1000.0)
        assert done.popen.wait(60) == 0, done.output()
        wait_for_every_event(cluster, "back", "every event after the outage", ("s1",))
    finally:
        pg.stop()
        shutil.rmtree(pg.root, ignore_errors=True)
