"""Scenarios B1-B12 (docs/scenarios.md): classic topics with put / get / subscribe /
unsubscribe, as a user runs them from the command line (each call a real client process)."""

from __future__ import annotations

import json
import signal

import pytest

from tests.integration.conftest import channel_stats
from tests.integration.procs import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def sub(cluster: Cluster, *args: str):
    return cluster.run(["-m", "subscriber", *args, *cluster.ns])


def pub(cluster: Cluster, *args: str):
    return cluster.run(["-m", "publisher", *args, *cluster.ns])


def put(cluster: Cluster, topic: str, message: str, pid: str = "p1", *extra: str) -> str:
    result = pub(cluster, "put", topic, message, "--id", pid, *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def get(cluster: Cluster, topic: str, sid: str, *extra: str) -> str:
    result = sub(cluster, "get", topic, "--id", sid, *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def subscribe(cluster: Cluster, topic: str, sid: str) -> None:
    result = sub(cluster, "subscribe", topic, "--id", sid)
    assert result.returncode == 0, result.stderr
    assert f"{sid} subscribed to {topic}" in result.stdout


def drain(cluster: Cluster, topic: str, sid: str, limit: int = 20) -> list[str]:
    """Get until there is no message; the messages, in the order received."""
    got = []
    for _ in range(limit):
        line = get(cluster, topic, sid)
        if line == f"no messages yet on {topic}":
            return got
        got.append(line)
    raise AssertionError(f"more than {limit} messages on {topic}: {got}")


def test_b1_gets_one_by_one_in_order_then_none(cluster: Cluster) -> None:
    cluster.broker()
    subscribe(cluster, "t", "s1")
    for i in range(1, 4):
        assert put(cluster, "t", f"m{i}") == f"p1-{i} stored on t"
    assert [get(cluster, "t", "s1") for _ in range(3)] == ["p1-1: m1", "p1-2: m2", "p1-3: m3"]
    assert get(cluster, "t", "s1") == "no messages yet on t"


def test_b2_every_subscriber_gets_every_message_once(cluster: Cluster) -> None:
    cluster.broker()
    subscribe(cluster, "t", "s1")
    subscribe(cluster, "t", "s2")
    for i in range(5):
        put(cluster, "t", f"m{i}")
    expected = [f"p1-{i + 1}: m{i}" for i in range(5)]
    assert drain(cluster, "t", "s1") == expected
    assert drain(cluster, "t", "s2") == expected


def test_b3_a_late_subscriber_gets_only_later_messages(cluster: Cluster) -> None:
    cluster.broker()
    assert put(cluster, "t", "early1") == "p1-1 not stored: t has no subscribers"
    put(cluster, "t", "early2")
    subscribe(cluster, "t", "s1")
    for i in range(3):
        put(cluster, "t", f"late{i}")
    assert drain(cluster, "t", "s1") == ["p1-3: late0", "p1-4: late1", "p1-5: late2"]


def test_b4_resubscribing_does_not_bring_back_old_pending(cluster: Cluster) -> None:
    cluster.broker()
    subscribe(cluster, "t", "s1")
    put(cluster, "t", "old1")
    put(cluster, "t", "old2")
    assert channel_stats(cluster, "t")["stored"] == 2
    assert sub(cluster, "unsubscribe", "t", "--id", "s1").stdout.strip() == "s1 unsubscribed from t"
    assert channel_stats(cluster, "t")["stored"] == 0
    subscribe(cluster, "t", "s1")
    assert get(cluster, "t", "s1") == "no messages yet on t"
    put(cluster, "t", "new")
    assert drain(cluster, "t", "s1") == ["p1-3: new"]


def test_b5_not_subscribed_is_a_clear_answer_and_consumes_nothing(cluster: Cluster) -> None:
    cluster.broker()
    subscribe(cluster, "t", "s2")
    put(cluster, "t", "m")
    result = sub(cluster, "get", "t", "--id", "s1")
    assert result.returncode == 5
    assert result.stdout.strip() == "s1 is not subscribed to t: no message consumed"
    assert drain(cluster, "t", "s2") == ["p1-1: m"]


def test_b6_a_lost_get_reply_is_retried_without_loss_or_duplicate(cluster: Cluster) -> None:
    cluster.broker()
    subscribe(cluster, "t", "s1")
    for i in range(3):
        put(cluster, "t", f"m{i}")
    assert get(cluster, "t", "s1") == "p1-1: m0"
    lost = sub(cluster, "get", "t", "--id", "s1", "--drop-replies", "1")
    assert lost.returncode == 0, lost.stderr
    assert "fault drop-reply fired: the reply to get was dropped" in lost.stderr
    assert lost.stdout.strip() == "p1-2: m1"  # the retry got the same message again
    assert drain(cluster, "t", "s1") == ["p1-3: m2"]


def test_b7_a_retried_put_is_stored_once(cluster: Cluster) -> None:
    cluster.broker()
    subscribe(cluster, "t", "s1")
    result = pub(cluster, "put", "t", "once", "--id", "p1", "--drop-replies", "1")
    assert result.returncode == 0, result.stderr
    assert "fault drop-reply fired: the reply to publish was dropped" in result.stderr
    assert result.stdout.strip() == "p1-1 was already stored on t (a retried put): stored once"
    assert drain(cluster, "t", "s1") == ["p1-1: once"]


def test_b8_broker_killed_between_puts_and_gets(cluster: Cluster) -> None:
    broker = cluster.broker()
    subscribe(cluster, "t", "s1")
    for i in range(3):
        put(cluster, "t", f"m{i}")
    assert get(cluster, "t", "s1") == "p1-1: m0"
    broker.popen.send_signal(signal.SIGKILL)
    broker.popen.wait(10)
    cluster.broker()
    assert drain(cluster, "t", "s1") == ["p1-2: m1", "p1-3: m2"]
    assert sub(cluster, "topics", "--id", "s1").stdout.strip() == "s1 is subscribed to: t"
    assert put(cluster, "t", "after") == "p1-4 stored on t"  # the sequence survived too
    assert drain(cluster, "t", "s1") == ["p1-4: after"]


def test_b9_a_message_everyone_got_is_deleted(cluster: Cluster) -> None:
    cluster.broker()
    subscribe(cluster, "t", "s1")
    subscribe(cluster, "t", "s2")
    put(cluster, "t", "m")
    assert drain(cluster, "t", "s1") == ["p1-1: m"]
    stats = channel_stats(cluster, "t")
    assert (stats["stored"], stats["unacked"]) == (1, 1)  # s2 has not got it yet
    assert drain(cluster, "t", "s2") == ["p1-1: m"]
    stats = channel_stats(cluster, "t")
    assert (stats["stored"], stats["unacked"]) == (0, 0)


def test_b10_a_subscriber_lists_its_topics(cluster: Cluster) -> None:
    cluster.broker()
    for topic in ("alpha", "beta", "gamma"):
        subscribe(cluster, topic, "s1")
    subscribe(cluster, "delta", "s2")
    assert sub(cluster, "unsubscribe", "gamma", "--id", "s1").returncode == 0
    listing = sub(cluster, "topics", "--id", "s1", "--json")
    assert sorted(t["channel"] for t in json.loads(listing.stdout)) == ["alpha", "beta"]
    text = sub(cluster, "topics", "--id", "s1").stdout.strip()
    assert text == "s1 is subscribed to: alpha, beta"


def test_b11_scenario_files_run_in_order_and_resume_after_a_crash(cluster: Cluster) -> None:
    cluster.broker()
    subscribe(cluster, "news", "s1")
    script = cluster.tmp / "pub.yaml"
    script.write_text(
        "steps:\n"
        "  - {topic: news, message: 'hello {n}', repeat: 6, sleep_between: 0.4}\n"
        "  - {topic: news, message: bye, sleep_after: 0}\n"
    )
    argv = ["-m", "publisher", "script", str(script), "--id", "p1", *cluster.ns]
    first = cluster.start("pub-script", argv, ready=r"p1-2 stored on news")
    first.popen.send_signal(signal.SIGKILL)  # a crash in the middle of the scenario
    first.popen.wait(10)
    resumed = cluster.run(argv)
    assert resumed.returncode == 0, resumed.stderr
    assert "steps run" in resumed.stdout
    messages = [line.split(": ", 1)[1] for line in drain(cluster, "news", "s1")]
    assert messages == [f"hello {n}" for n in range(1, 7)] + ["bye"]

    sub_script = cluster.tmp / "sub.yaml"
    sub_script.write_text(
        "steps:\n"
        "  - {topic: extra, action: subscribe}\n"
        "  - {topic: news, action: topics}\n"
        "  - {topic: extra, action: get, repeat: 2}\n"
        "  - {topic: extra, action: unsubscribe}\n"
    )
    out = cluster.run(["-m", "subscriber", "script", str(sub_script), "--id", "s9", *cluster.ns])
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "s9 subscribed to extra (group s9, pull)",
        "s9 is subscribed to: extra",
        "no messages yet on extra",
        "no messages yet on extra",
        "s9 unsubscribed from extra",
        f"script {sub_script}: 5 steps run",
    ]
    again = cluster.run(["-m", "subscriber", "script", str(sub_script), "--id", "s9", *cluster.ns])
    assert again.stdout.strip().startswith(  # all done already, and it says so
        f"script {sub_script}: 0 steps run: all 5 were completed by an earlier run of this file"
    )


def test_b11_a_bad_scenario_is_refused_with_the_step_named(cluster: Cluster) -> None:
    bad = cluster.tmp / "bad.yaml"
    bad.write_text("steps:\n  - {topic: t, message: hi}\n  - {topic: t, actoin: get}\n")
    result = cluster.run(["-m", "subscriber", "script", str(bad), "--id", "s1", *cluster.ns])
    assert result.returncode == 2
    assert (
        result.stderr.strip() == "error: step 1: action must be one of subscribe, "
        "unsubscribe, get, topics, got None"
    )


def test_b12_two_brokers_share_topics_fairly(cluster: Cluster) -> None:
    cluster.broker(name="b1", extra=("--broker-id", "b1"))
    b2 = cluster.broker(name="b2", extra=("--broker-id", "b2"))
    for topic in ("t1", "t2", "t3", "t4"):
        subscribe(cluster, topic, "s1")
    rows = json.loads(cluster.run(["-m", "channel_server", "list", "--json", *cluster.ns]).stdout)
    assert {r["channel"]: r["broker"] for r in rows} == {
        "t1": "b1",
        "t2": "b2",
        "t3": "b1",
        "t4": "b2",
    }
    for topic in ("t1", "t2", "t3", "t4"):
        put(cluster, topic, f"to {topic}")
        assert drain(cluster, topic, "s1") == [f"p1-1: to {topic}"]  # a sequence per topic

    b2.popen.send_signal(signal.SIGKILL)
    b2.popen.wait(10)
    down = sub(cluster, "get", "t2", "--id", "s1", "--attempts", "2", "--timeout", "1")
    assert down.returncode == 3
    assert (
        down.stderr.strip()
        .splitlines()[-1]
        .startswith("error: channel t2: no answer after 2 attempts")
    )
    assert get(cluster, "t1", "s1") == "no messages yet on t1"  # b1's topics carry on
    cluster.broker(name="b2", extra=("--broker-id", "b2"))
    put(cluster, "t2", "back")
    assert drain(cluster, "t2", "s1") == ["p1-2: back"]


def test_gets_acknowledged_just_before_a_broker_sigkill_are_not_got_again(
    cluster: Cluster,
) -> None:
    """A get acknowledges the message named as got last; acks were written up to 50 ms
    later, so after a SIGKILL the messages acknowledged in those 50 ms were handed out
    again (session 32's Jepsen probe: 9-53 repeats per kill). Each get's ack is now
    on disk before its reply."""
    from publisher import Putter
    from subscriber import PullClient

    broker = cluster.broker()
    state = cluster.tmp / "reader"
    got: list[str] = []
    with PullClient.open("reader", ns_port=cluster.ns_port, state_dir=state) as reader:
        reader.subscribe("t")
        with Putter.open("writer", ns_port=cluster.ns_port, state_dir=cluster.tmp) as writer:
            for i in range(60):
                writer.put("t", i)
        for _ in range(40):  # as fast as they come: the last ones' acks are fresh
            got.append(reader.get("t")["event"]["id"])
        broker.popen.send_signal(signal.SIGKILL)
    broker.popen.wait(10)
    cluster.broker()
    with PullClient.open("reader", ns_port=cluster.ns_port, state_dir=state) as reader:
        while (reply := reader.get("t"))["status"] == "message":
            got.append(reply["event"]["id"])
    assert len(got) == len(set(got)) == 60, [i for i in got if got.count(i) > 1]


def test_bare_gets_are_not_got_again_after_a_broker_sigkill(cluster: Cluster) -> None:
    """A client that absorbs no repeats (a bare RPC caller, another language) gets each
    message once too: its gets' acks are on disk before their replies."""
    from channel_client.lookup import resolve_channel
    from channel_server.wire import make_proxy
    from publisher import Putter

    broker = cluster.broker()
    with Putter.open("writer", ns_port=cluster.ns_port, state_dir=cluster.tmp) as writer:
        for i in range(60):
            writer.put("t", i)  # creates the topic; then the reader subscribes
    got: list[str] = []

    def drain(channel, last: str | None, limit: int) -> str | None:
        for _ in range(limit):
            reply = channel.get("reader", last)
            if reply["status"] != "message":
                break
            event = reply["event"]
            got.append(event["id"])
            last = f"{event['publisher_id']}/{event['id']}"
        return last

    uri = resolve_channel("127.0.0.1", cluster.ns_port, "t")
    with make_proxy(uri, 10.0) as channel:
        channel.subscribe("reader")
    with Putter.open("writer", ns_port=cluster.ns_port, state_dir=cluster.tmp) as writer:
        for i in range(60):
            writer.put("t", i)
    with make_proxy(uri, 10.0) as channel:
        last = drain(channel, None, 40)
        broker.popen.send_signal(signal.SIGKILL)
    broker.popen.wait(10)
    cluster.broker()
    uri = resolve_channel("127.0.0.1", cluster.ns_port, "t")
    with make_proxy(uri, 10.0) as channel:
        drain(channel, last, 100)
    assert len(got) == len(set(got)) == 60, [i for i in got if got.count(i) > 1]
