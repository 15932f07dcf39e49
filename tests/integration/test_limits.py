"""Issue 13 with real processes: the caps of ``serve`` (channels, members, bytes queued)
refuse with typed errors, the bytes queued come back after a SIGKILL, and a push
subscriber's callback may only name the host it connected from (or an allowed one),
while normal subscribers keep working."""

from __future__ import annotations

from typing import Any

import pytest

from channel_client.lookup import resolve_channel
from channel_server.errors import InvalidArgument, InvalidEvent, LimitReached, UnknownChannel
from channel_server.wire import broker_ns_name, locate_ns, make_proxy
from tests.integration.conftest import channel_stats, publisher_for
from tests.integration.procs import Cluster, logged, wait_until

pytestmark = pytest.mark.integration
SECRET = "a-callback-secret-of-the-test"
MIB = 1 << 20


def channel_call(cluster: Cluster, channel: str, method: str, *args: Any) -> Any:
    with make_proxy(resolve_channel("127.0.0.1", cluster.ns_port, channel), 5.0) as proxy:
        return getattr(proxy, method)(*args)


def broker_call(cluster: Cluster, method: str, *args: Any) -> Any:
    with locate_ns("127.0.0.1", cluster.ns_port) as ns:
        uri = ns.lookup(broker_ns_name("b1"))
    with make_proxy(uri, 5.0) as proxy:
        return getattr(proxy, method)(*args)


def publish(cluster: Cluster, channel: str, *flags: str) -> Any:
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", channel, "--id", "PUB"]
    return cluster.run([*argv, *flags])


# -- input --------------------------------------------------------------------------------
def test_a_payload_with_integer_map_keys_is_a_typed_refusal(cluster: Cluster) -> None:
    cluster.broker("orders", extra=("--memory",))
    with publisher_for(cluster, "orders") as pub, pytest.raises(InvalidEvent) as info:
        pub.publish([pub.event("fine"), pub.event({1: "one"})])
    err = info.value
    assert (err.field, err.index, err.reason) == ("payload", 1, "map keys must be strings")
    assert channel_stats(cluster, "orders")["unacked"] == 0


# -- callback hosts -----------------------------------------------------------------------
def test_a_callback_naming_another_host_is_refused_and_subscribers_still_work(
    cluster: Cluster,
) -> None:
    cluster.broker("orders", extra=("--memory",))
    cluster.subscriber("orders", "s1")
    elsewhere = "PYRO:sub.evil@127.0.0.2:9"  # this test connects from 127.0.0.1
    with pytest.raises(InvalidArgument) as info:
        channel_call(cluster, "orders", "subscribe", "evil", elsewhere, None, None, SECRET)
    assert info.value.argument == "callback"
    assert "host 127.0.0.2 is not the address the subscriber connected from" in str(info.value)
    assert publish(cluster, "orders", "--count", "5").returncode == 0
    records = cluster.wait_for_records("orders", ("s1",), 5)
    assert len(records["s1"]) == 5
    members = channel_stats(cluster, "orders")["groups"]["default"]["members"]
    assert [m["id"] for m in members] == ["s1"]


def test_callback_hosts_lets_a_named_host_in(cluster: Cluster) -> None:
    cluster.broker("orders", extra=("--memory", "--callback-hosts", "127.0.0.2,10.0.0.9"))
    elsewhere = "PYRO:sub.far@127.0.0.2:9"
    reply = channel_call(cluster, "orders", "subscribe", "far", elsewhere, None, None, SECRET)
    assert (reply["subscriber_id"], reply["mode"]) == ("far", "push")
    assert channel_call(cluster, "orders", "unsubscribe", "far") is True


# -- caps ---------------------------------------------------------------------------------
def test_channel_member_and_byte_caps_refuse_with_typed_errors(cluster: Cluster) -> None:
    """Each refusal in the broker's log too: the operator learned of them only from the
    clients (session 33's operator probe)."""
    limits = ("--max-channels", "2", "--max-members", "1", "--max-queued-bytes", "2M")
    broker = cluster.broker("a", extra=("--memory", *limits))
    assert broker_call(cluster, "create_channel", "b").startswith("PYRO:channel.b@")
    with pytest.raises(LimitReached) as info:
        broker_call(cluster, "create_channel", "c")
    assert (info.value.resource, info.value.limit) == ("channels", 2)
    assert broker_call(cluster, "channels") == ["a", "b"]

    assert channel_call(cluster, "a", "subscribe", "p1")["mode"] == "pull"
    with pytest.raises(LimitReached) as info:
        channel_call(cluster, "a", "subscribe", "p2")
    assert (info.value.resource, info.value.limit) == ("members", 1)

    result = publish(cluster, "a", "--count", "3", "--payload-size", str(MIB - 100))
    assert result.returncode == 4, result.stdout + result.stderr
    assert "2 accepted, 0 duplicate, 1 refused (QueueFull)" in result.stdout
    stats = channel_stats(cluster, "a")
    assert stats["unacked"] == 2
    assert stats["max_queued_bytes"] == 2 * MIB >= stats["queued_bytes"] > 2 * (MIB - 100)
    logged(broker, r"refused channel 'c': .*limit of 2 channels", 1)
    logged(broker, r"a: refused p2: .*limit of 1 members", 1)
    logged(
        broker, r"a: full: refused 1 events \(2097152 bytes queued reached: --max-queued-bytes\)", 1
    )


def test_partition_sub_queues_over_groups_are_capped_with_a_typed_refusal(
    cluster: Cluster,
) -> None:
    """Each group keeps a sub-queue per partition: one account's groups times its
    partition keys had no bound but the broker's memory (session 33's attacker: 500
    groups x 2,000 keys took it from 41 to 609 MB)."""
    broker = cluster.broker("a", extra=("--memory", "--max-partition-queues", "20"))
    for group in ("g1", "g2"):  # with default: 3 groups, 3 sub-queues per new partition
        assert channel_call(cluster, "a", "subscribe", group, None, group)["mode"] == "pull"
    result = publish(cluster, "a", "--count", "10", "--partitions", "10")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "6 accepted, 0 duplicate, 4 refused (QueueFull)" in result.stdout
    stats = channel_stats(cluster, "a")
    assert (stats["partition_queues"], stats["max_partition_queues"]) == (18, 20)
    assert stats["unacked"] == 6
    logged(broker, r"a: full: refused 4 events \(20 partition sub-queues reached", 1)


def test_bytes_queued_come_back_after_a_sigkill(cluster: Cluster) -> None:
    broker = cluster.broker("orders", extra=("--max-queued-bytes", "3M"))
    assert publish(cluster, "orders", "--count", "2", "--payload-size", str(MIB)).returncode == 0
    before = channel_stats(cluster, "orders")["queued_bytes"]
    assert before > 2 * MIB
    broker.kill()
    cluster.broker("orders", extra=("--max-queued-bytes", "3M"))
    assert channel_stats(cluster, "orders")["queued_bytes"] == before
    refused = publish(cluster, "orders", "--count", "1", "--payload-size", str(MIB))
    assert refused.returncode == 4  # the restored bytes still count against the cap


def test_dead_letters_past_their_cap_drop_the_oldest_and_stay_dropped(cluster: Cluster) -> None:
    """A handler that always failed made the broker hold every event published, in memory
    and on disk, past every cap (session 33's attacker probe)."""
    dead = ("--max-attempts", "1", "--max-dead-letters", "3")
    broker = cluster.broker("orders", extra=dead)
    subscriber = cluster.subscriber("orders", "s1", "--fault", "fail-first:1.0")
    assert publish(cluster, "orders", "--count", "10").returncode == 0
    wait_until(lambda: channel_stats(cluster, "orders")["acked"] == 10, what="10 dead letters")
    kept = _dead_letter_ids(cluster)
    assert len(kept) == 3 and kept <= {f"PUB-{n}" for n in range(1, 11)}
    assert broker.count(r"dropped the \d+ oldest dead letters") >= 1
    subscriber.terminate()
    broker.terminate()
    cluster.broker("orders", extra=dead)  # the same data dir: the dropped ones stay gone
    assert _dead_letter_ids(cluster) == kept


def _dead_letter_ids(cluster: Cluster) -> set[str]:
    listed = cluster.run(["-m", "channel_server", "dead-letters", "orders", *cluster.ns])
    assert listed.returncode == 0, listed.stderr
    return {word for word in listed.stdout.split() if word.startswith("PUB-")}


# -- flags --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--max-channels", "0"), "--max-channels"),
        (("--max-members", "-1"), "--max-members"),
        (("--max-queued-bytes", "lots"), "--max-queued-bytes"),
        (("--max-queued-bytes", "1K"), "--max-queued-bytes"),  # below one largest event
        (("--callback-hosts", ","), "--callback-hosts"),
    ],
    ids=["channels", "members", "bytes-word", "bytes-small", "hosts"],
)
def test_bad_limit_flags_exit_with_one_line(
    cluster: Cluster, flags: tuple[str, ...], named: str
) -> None:
    result = cluster.run(["-m", "channel_server", "serve", *cluster.ns, "--memory", *flags])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert named in lines[0]


def test_a_full_channel_is_waited_out_and_said_so(cluster: Cluster) -> None:
    """`publish --wait-when-full` into a channel at its capacity: it says why it waits
    (it used to wait in silence), and goes on once a subscriber drains the channel."""
    cluster.broker("tiny", extra=("--capacity", "10"))
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "tiny", "--id", "P"]
    publisher = cluster.start("publisher", [*argv, "--count", "30", "--wait-when-full"], None)
    publisher.wait_for(r"channel .tiny. is full \(10 unacknowledged events\).*waiting for its")
    cluster.subscriber("tiny", "s1")
    assert publisher.popen.wait(30) == 0, publisher.output()
    assert "30 accepted, 0 duplicate, 0 refused" in publisher.output()
    assert len(cluster.wait_for_records("tiny", ("s1",), 30)["s1"]) == 30


def test_a_deleted_channel_frees_its_place_and_stays_deleted(cluster: Cluster) -> None:
    """Nothing deleted a channel: topics made once counted against --max-channels for
    good, across restarts too (session 34's soak and newcomer probes)."""
    extra = ("--max-channels", "2")
    broker = cluster.broker("a", extra=extra)
    broker_call(cluster, "create_channel", "b")
    with pytest.raises(LimitReached):
        broker_call(cluster, "create_channel", "c")
    assert channel_call(cluster, "b", "subscribe", "p1")["mode"] == "pull"
    assert publish(cluster, "b", "--count", "3").returncode == 0
    delete = ["-m", "channel_server", "delete", *cluster.ns]
    refused = cluster.run([*delete, "b"])
    assert refused.returncode == 4, refused.stderr
    assert "still has 1 members, 3 events not acknowledged" in refused.stderr
    assert broker_call(cluster, "channels") == ["a", "b"]  # refused: still served
    assert channel_stats(cluster, "b")["unacked"] == 3
    done = cluster.run([*delete, "b", "--force"])
    assert done.returncode == 0, done.stderr
    assert "b deleted, with 1 members, 3 events not acknowledged" in done.stdout
    assert broker_call(cluster, "create_channel", "c").startswith("PYRO:channel.c@")
    assert cluster.run([*delete, "gone"]).returncode == 2
    logged(broker, r"channel b deleted with what it held", 1)
    broker.kill()
    cluster.broker("a", extra=extra)
    assert broker_call(cluster, "channels") == ["a", "c"]
    with pytest.raises(UnknownChannel):
        resolve_channel("127.0.0.1", cluster.ns_port, "b")
