"""Members coming back, nobody left, and the status view."""

from __future__ import annotations

import json

import pytest

from channel_client.exits import UNKNOWN_CHANNEL_HINT
from tests.integration.conftest import channel_stats, publisher_for
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration


def test_with_nobody_left_events_wait_for_the_next_subscriber(cluster: Cluster) -> None:
    cluster.broker("solo")
    crasher = cluster.subscriber("solo", "s1", "--prefetch", "1", "--fault", "crash-after:3")
    with publisher_for(cluster, "solo") as pub:
        pub.publish([pub.event(i) for i in range(6)])
    assert crasher.popen.wait(10) == 137
    wait_until(
        lambda: not channel_stats(cluster, "solo")["groups"]["default"]["members"][0]["active"],
        what="s1 inactive",
    )
    stats = channel_stats(cluster, "solo")
    assert stats["unacked"] == 4
    assert stats["groups"]["default"]["partitions"][0]["owner"] is None
    cluster.subscriber("solo", "s2")
    got = cluster.wait_for_records("solo", ("s2",), 4)["s2"]
    assert [r["id"] for r in got] == ["PUB-3", "PUB-4", "PUB-5", "PUB-6"]


def test_a_crashed_member_resumes_with_its_id(cluster: Cluster) -> None:
    cluster.broker("back")
    crasher = cluster.subscriber("back", "s1", "--prefetch", "1", "--fault", "crash-after:2")
    with publisher_for(cluster, "back") as pub:
        pub.publish([pub.event(i) for i in range(4)])
    assert crasher.popen.wait(10) == 137
    cluster.subscriber("back", "s1")  # same id, new address: resumes the subscription
    wait_until(lambda: channel_stats(cluster, "back")["unacked"] == 0, what="all acked")
    got = cluster.records("back", "s1")["s1"]
    assert [r["id"] for r in got] == ["PUB-1", "PUB-2", "PUB-3", "PUB-4"]
    (only,) = channel_stats(cluster, "back")["groups"]["default"]["members"]
    assert only["id"] == "s1"
    assert only["active"] is True


def test_a_live_id_cannot_be_taken_from_another_address(cluster: Cluster) -> None:
    cluster.broker("taken")
    cluster.subscriber("taken", "s1")
    second = cluster.run(
        ["-m", "subscriber", "run", *cluster.ns, "--channel", "taken", "--id", "s1"], 30
    )
    assert second.returncode == 2
    assert "already active" in second.stderr.strip().splitlines()[-1]


def test_status_shows_members_partitions_and_dead_letters(cluster: Cluster) -> None:
    cluster.broker("st")
    cluster.subscriber("st", "s1", "--fault", "fail-on:PUB-2")
    with publisher_for(cluster, "st") as pub:
        pub.publish([pub.event(i, partition=i % 2) for i in range(4)])
    wait_until(lambda: channel_stats(cluster, "st")["dead_letters"] == 1, what="dead letter")
    text = cluster.run(["-m", "channel_server", "status", "st", *cluster.ns])
    assert text.returncode == 0, text.stderr
    assert "st (queue, ids unique per publisher) on broker b1: 0/1000000 unacknowledged" in (
        text.stdout
    )
    assert "4 done (acknowledged or dead-lettered), 1 dead letters" in text.stdout
    assert "s1" in text.stdout
    assert "long delays" in text.stdout
    raw = cluster.run(["-m", "channel_server", "status", *cluster.ns, "--json"])
    (stats,) = json.loads(raw.stdout)
    assert stats["broker"] == "b1"
    parts = stats["groups"]["default"]["partitions"]
    assert sorted(p["partition"] for p in parts) == [0, 1]
    assert {p["owner"] for p in parts} == {"s1"}
    missing = cluster.run(["-m", "channel_server", "status", "nope", *cluster.ns])
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"error: unknown channel 'nope' {UNKNOWN_CHANNEL_HINT}"


def test_status_of_a_channel_whose_broker_is_down_exits_unavailable(cluster: Cluster) -> None:
    """It said so and exited 0 (``--json``: ``[]``), so a script's ``status || alert``
    saw a healthy channel (session 33's operator probe)."""
    cluster.start("ns", ["-m", "channel_server", "nameserver", *cluster.ns], "ready at")
    cluster.broker("gone", extra=("--memory",)).kill()  # its name stays in the name server
    text = cluster.run(["-m", "channel_server", "status", "gone", *cluster.ns])
    assert text.returncode == 3, text.stdout + text.stderr
    assert "gone on broker b1: unreachable" in text.stdout
    raw = cluster.run(["-m", "channel_server", "status", "gone", "--json", *cluster.ns])
    assert (raw.returncode, json.loads(raw.stdout)) == (3, [])
    assert "gone on broker b1: unreachable" in raw.stderr
