"""``serve --http``: a real broker's metrics and JSON API after a known workload, read
over HTTP as Prometheus and the page read them, with the broker's credentials."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from channel_client import cli_common as cc
from channel_server.credentials import MONITOR_TOKEN_FILE, read_monitor_token, read_token
from tests.integration.conftest import publisher_for
from tests.integration.procs import Cluster, free_port, wait_until

CLI = ["-m", "channel_server"]


class Monitor:
    """HTTP calls to one broker's monitor, with the monitor token unless told otherwise."""

    def __init__(self, cluster: Cluster, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.token = read_monitor_token(cluster.tmp / "state")
        assert self.token

    def get(self, path: str, auth: str | None = "token") -> tuple[int, bytes]:
        headers = {}
        if auth == "token":
            pair = base64.b64encode(f"owner:{self.token}".encode()).decode()
            headers["Authorization"] = f"Basic {pair}"
        elif auth is not None:
            headers["Authorization"] = auth
        request = urllib.request.Request(self.base + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def json(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, body
        return json.loads(body)

    def metrics(self) -> dict[tuple[str, tuple], float]:
        status, body = self.get("/metrics")
        assert status == 200, body
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
        }


def start(cluster: Cluster, *channels: str) -> Monitor:
    port = free_port()
    broker = cluster.broker(*channels, extra=("--memory", "--http", f"127.0.0.1:{port}"))
    assert f"; http http://127.0.0.1:{port}/" in broker.output()
    return Monitor(cluster, port)


def test_metrics_count_a_known_workload_exactly(cluster: Cluster) -> None:
    # Given a broker with two channels and one subscriber on orders
    monitor = start(cluster, "orders", "audit")
    cluster.subscriber("orders", "s1")
    # When 7 events go to orders and 3 to audit (which nobody reads)
    sent = {}
    for channel, count in (("orders", 7), ("audit", 3)):
        with publisher_for(cluster, channel) as pub:
            sent[channel] = [pub.event(i) for i in range(count)]
            assert pub.publish(sent[channel])["accepted"] == count
    # and 2 of orders' events are published again
    with publisher_for(cluster, "orders") as pub:
        assert len(pub.publish(sent["orders"][:2])["duplicates"]) == 2
    cluster.wait_for_records("orders", ("s1",), 7)
    orders, audit = (("channel", "orders"),), (("channel", "audit"),)
    values = wait_until(
        lambda: (m := monitor.metrics())[("pubsub_channel_acked_events_total", orders)] == 7 and m,
        what="7 acknowledged on orders",
    )
    # Then the counts are exact, per channel, group and member
    assert values["pubsub_channel_accepted_events_total", orders] == 7
    assert values["pubsub_channel_published_events_total", orders] == 9
    assert values["pubsub_channel_duplicate_events_total", orders] == 2
    assert values["pubsub_channel_refused_events_total", orders] == 0
    assert values["pubsub_channel_unacked_events", orders] == 0
    assert values["pubsub_channel_accepted_events_total", audit] == 3
    assert values["pubsub_channel_acked_events_total", audit] == 0
    assert values["pubsub_group_backlog_events", (*audit, ("group", "default"))] == 3
    group = (*orders, ("group", "default"))
    assert values["pubsub_group_members", (*group, ("state", "active"))] == 1
    s1 = (*group, ("member", "s1"))
    assert values["pubsub_member_delivered_events_total", s1] == 7
    assert values["pubsub_member_acked_events_total", s1] == 7
    assert 1 <= values["pubsub_member_batches_total", s1] <= 7  # pushes of 1 to 7 events
    assert 1 <= values["pubsub_member_ack_messages_total", s1] <= 7
    assert values["pubsub_member_active", s1] == 1
    assert values["pubsub_member_failures_total", s1] == 0
    assert values["pubsub_broker_channels", ()] == 2
    assert values["process_resident_memory_bytes", ()] > 0
    assert values["pubsub_broker_threads", ()] > 0
    assert values["pubsub_group_ack_latency_seconds_count", group] == 7
    assert values["pubsub_channel_store_write_seconds_count", orders] == 1  # duplicates: none
    assert values["pubsub_group_nacked_events_total", group] == 0


def test_a_poison_event_counts_its_nacks_redeliveries_and_dead_letter(cluster: Cluster) -> None:
    # Given a subscriber whose handler always fails on PUB-3 (3 attempts by default)
    monitor = start(cluster, "orders")
    cluster.subscriber("orders", "s1", "--fault", "fail-on:PUB-3")
    # When 5 events are published and the poison one is given up on
    with publisher_for(cluster, "orders") as pub:
        pub.publish([pub.event(i) for i in range(5)])
    orders = (("channel", "orders"),)

    def settled() -> dict | None:
        m = monitor.metrics()
        done = m[("pubsub_channel_dead_letters", orders)] == 1
        return m if done and m[("pubsub_channel_acked_events_total", orders)] == 5 else None

    values = wait_until(settled, what="a dead letter and the 4 others acked")
    # Then each failure, each delivery after the first and the dead letter are counted
    group = (*orders, ("group", "default"))
    assert values["pubsub_group_nacked_events_total", group] == 3
    # PUB-3 twice; PUB-4 and PUB-5 (its partition: they wait for it) come back unhandled
    # after each of its failures, still at attempt 1: not counted
    assert values["pubsub_group_redelivered_events_total", group] == 2
    assert values["pubsub_group_dead_lettered_events_total", group] == 1
    assert values["pubsub_group_ack_latency_seconds_count", group] == 4  # the 4 acked


def test_the_json_api_gives_what_list_and_status_print(cluster: Cluster) -> None:
    monitor = start(cluster, "orders", "audit")
    with publisher_for(cluster, "orders") as pub:
        pub.publish([pub.event(i) for i in range(4)])
    rows = monitor.json("/api/channels")
    listed = json.loads(cluster.run([*CLI, "list", "--json", *cluster.ns]).stdout)
    volatile = {"rates"}  # measured at each call
    assert [{k: v for k, v in r.items() if k not in volatile} for r in rows] == [
        {k: v for k, v in r.items() if k not in volatile} for r in listed
    ]
    assert [r["channel"] for r in rows] == ["audit", "orders"]
    entry = monitor.json("/api/channels/orders")
    status = json.loads(cluster.run([*CLI, "status", "orders", "--json", *cluster.ns]).stdout)
    assert {k: v for k, v in entry.items() if k not in volatile} == {
        k: v for k, v in status[0].items() if k not in volatile
    }
    assert (entry["accepted"], entry["broker"]) == (4, "b1")
    status, refusal = monitor.get("/api/channels/orders/dead-letters")  # plain HTTP
    assert status == 403 and b"served over HTTPS only" in refusal
    assert monitor.get("/api/channels/nope")[0] == 404


WRONG = [None, "Basic " + base64.b64encode(b"owner:wrong").decode(), "Bearer wrong", "Digest x"]


def test_no_or_a_wrong_credential_gets_401(cluster: Cluster) -> None:
    monitor = start(cluster, "orders")
    for auth in WRONG:
        for path in ("/metrics", "/api/channels", "/"):
            status, body = monitor.get(path, auth)
            assert status == 401, (auth, path, body)
            assert b"orders" not in body
    assert monitor.get("/metrics", f"Bearer {monitor.token}")[0] == 200


def test_the_local_token_itself_is_refused_and_the_monitor_token_kept_private(
    cluster: Cluster,
) -> None:
    """Over plain HTTP a credential reaches whoever holds the monitor's port while the
    broker is away: the local token would make them the owner of every daemon, so the
    monitor takes a token derived from it, kept beside it (0600)."""
    monitor = start(cluster, "orders")
    token = read_token(cluster.tmp / "state")
    status, body = monitor.get("/api/channels", f"Bearer {token}")
    assert status == 401 and b"monitor token" in body, body
    kept = cluster.tmp / "state" / MONITOR_TOKEN_FILE
    assert kept.read_text().strip() == monitor.token != token
    assert kept.stat().st_mode & 0o777 == 0o600


def test_a_non_loopback_http_address_needs_insecure(cluster: Cluster) -> None:
    argv = [*CLI, "serve", *cluster.ns, "--memory", "--http", "0.0.0.0:0"]
    result = cluster.run(argv)
    assert result.returncode == cc.EXIT_USAGE
    assert "--http: 0.0.0.0 is not a loopback address" in result.stderr
    assert "Traceback" not in result.stderr
