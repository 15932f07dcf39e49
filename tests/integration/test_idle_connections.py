"""Servers close idle connections (--comm-timeout); clients notice and reconnect before
their next call, so an idle publisher, a subscriber between heartbeats and the broker's
link to a quiet subscriber all go on without a failed call (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from channel_server.wire import closed_by_peer
from tests.integration.conftest import channel_stats, publisher_for
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration
SHORT = ("--comm-timeout", "0.3")


def test_idle_connections_are_closed_and_reopened_without_a_failure(cluster: Cluster) -> None:
    broker = cluster.broker("jobs", extra=SHORT)
    # heartbeats every 2 s: its connection to the broker is closed in between
    sub = cluster.subscriber("jobs", "s1", *SHORT, "--log-level", "DEBUG")
    with publisher_for(cluster, "jobs", "P") as pub:
        pub.publish([pub.event({"n": 1})])
        cluster.wait_for_records("jobs", ("s1",), 1)
        proxy = pub._remote._proxy
        wait_until(lambda: closed_by_peer(proxy), 5.0, "the broker closes the idle connection")
        sub.wait_for("closed the idle connection from", 5.0)  # the broker's pushes
        for n in range(2, 5):
            assert pub.publish([pub.event({"n": n})])["accepted"] == 1
        assert pub.retries == 0
    records = cluster.wait_for_records("jobs", ("s1",), 4)
    assert [r["id"] for r in records["s1"]] == [f"P-{n}" for n in range(1, 5)]
    assert broker.count(r"push of \d+ events to .* failed") == 0
    (member,) = channel_stats(cluster, "jobs")["groups"]["default"]["members"]
    assert member["id"] == "s1" and member["active"]


def test_the_benchmarks_proxy_is_made_anew_after_an_idle_close(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/bench_support's channel proxy: a long run publishes for longer than the
    broker keeps the bench's stats connection open, and its next call still answers (a
    Pyro5 proxy cannot reconnect by itself: each connection proves the token afresh)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "scripts"))
    from bench_support.service import channel_proxy

    cluster.broker("jobs", extra=SHORT)
    with channel_proxy(cluster.ns_port, "jobs") as channel:
        first = channel.stats()["accepted"]
        idle = getattr(channel, "_proxy", channel)  # the Pyro5 proxy it holds now
        wait_until(lambda: closed_by_peer(idle), 5.0, "the broker closes the idle connection")
        assert channel.stats()["accepted"] == first
