"""Servers close idle connections (--comm-timeout); clients notice and reconnect before
their next call, so an idle publisher, a subscriber between heartbeats and the broker's
link to a quiet subscriber all go on without a failed call (issue 13)."""

from __future__ import annotations

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
