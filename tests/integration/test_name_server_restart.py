"""A name server that restarts knows none of the brokers' names: each broker puts its
own back (``--names-check``), so clients starting afterwards find the channels again
without a broker restart. Real processes on 127.0.0.1; the name servers really SIGKILLed."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from channel_server.wire import NS_BROKER_PREFIX, locate_ns
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration
CLI = ["-m", "channel_server"]
CHECK = ("--names-check", "0.2")
FOUND_S = 10.0
"""Longer than a check (0.2 s) and a broker's round trips to the name server, by far."""


def listed(cluster: Cluster) -> str:
    """`channel_server list`'s output ('' when the name server does not answer)."""
    result = cluster.run([*CLI, "list", *cluster.ns])
    return result.stdout if result.returncode == 0 else ""


def publish(cluster: Cluster, channel: str, publisher: str, count: int) -> str:
    argv = ["publish", *cluster.ns, "--channel", channel, "--id", publisher]
    result = cluster.run(["-m", "publisher", *argv, "--count", str(count), "--retry-for", "5"])
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_restarted_name_server_finds_the_channels_again(cluster: Cluster) -> None:
    ns = cluster.start("ns", [*CLI, "nameserver", *cluster.ns], "ready at")
    broker = cluster.broker("orders", extra=CHECK)
    cluster.subscriber("orders", "s1")
    assert "10 accepted" in publish(cluster, "orders", "P1", 10)
    ns.kill()
    cluster.start("ns2", [*CLI, "nameserver", *cluster.ns], "ready at")
    wait_until(lambda: "orders" in listed(cluster), FOUND_S, "orders listed again")
    assert broker.count(r"had lost 2 of this broker's names") == 1, broker.output()
    assert "10 accepted" in publish(cluster, "orders", "P2", 10)  # a client new to it
    got = cluster.wait_for_records("orders", ("s1",), 20)["s1"]
    assert sorted(r["publisher_id"] for r in got) == ["P1"] * 10 + ["P2"] * 10


def test_a_broker_puts_its_names_back_in_another_brokers_embedded_name_server(
    cluster: Cluster,
) -> None:
    """The first broker embeds the name server; the second registers in it. When the
    first restarts, its name server starts empty: the second's channel comes back."""
    first = cluster.broker("one", name="b1", extra=("--broker-id", "b1"))
    cluster.broker("two", name="b2", extra=("--broker-id", "b2", *CHECK))
    assert "two" in listed(cluster)
    first.kill()
    again = ("--broker-id", "b1", "--data-dir", str(cluster.data_dir("b1")))
    cluster.broker(name="b1again", extra=again)
    wait_until(lambda: {"one", "two"} <= set(listed(cluster).split()), FOUND_S, "both listed")
    assert "5 accepted" in publish(cluster, "two", "P", 5)


def test_a_broker_stopping_while_its_name_server_is_frozen_asks_it_once(
    cluster: Cluster,
) -> None:
    """Its names were removed one connection each, each waiting out its timeout: 20
    channels took a stop 100 s, past a supervisor's patience, and the leases went last."""
    ns = cluster.start("ns", [*CLI, "nameserver", *cluster.ns], "ready at")
    broker = cluster.broker("a", "b", "c", "d", extra=("--memory",))
    os.kill(ns.popen.pid, signal.SIGSTOP)
    try:
        assert broker.terminate(60.0) == 0
    finally:
        os.kill(ns.popen.pid, signal.SIGCONT)
    assert broker.count("could not remove") == 1, broker.output()
    assert broker.count(r"could not remove 5 names \(pubsub.channel.a, ...\)") == 1


def test_a_second_broker_with_a_live_brokers_id_is_refused(cluster: Cluster) -> None:
    """It took the name server's entry over silently, and list showed both brokers'
    channels as one broker's (session 33's operator probe). A broker that crashed leaves
    its entry behind: a new one with its id takes it."""
    cluster.start("ns", [*CLI, "nameserver", *cluster.ns], "ready at")
    first = cluster.broker("a", extra=("--memory",))
    second = [*CLI, "serve", *cluster.ns, "--memory", "--channel", "b"]
    refused = cluster.run(second, timeout_s=30.0)
    assert refused.returncode != 0
    assert "b1 is the id of another broker, serving at PYRO:" in refused.stderr
    assert "broker b1 not started" in refused.stderr
    with locate_ns("127.0.0.1", cluster.ns_port) as ns:  # the live one's entry stays
        assert NS_BROKER_PREFIX + "b1" in ns.list(prefix=NS_BROKER_PREFIX)
    first.kill()  # its entry stays in the name server
    cluster.start("b1-again", second, r"broker b1 ready at")
    assert [line.split()[0] for line in listed(cluster).splitlines()] == ["a", "b"]


def test_a_brokers_check_of_its_name_server_is_no_warning_there(cluster: Cluster) -> None:
    """A broker makes sure its name server refuses strangers by calling it as one: each
    broker start logged a refusal there as a WARNING, as if someone had tried to get in
    (session 33's operator probe). A wrong password still is one."""
    ns = cluster.start("ns", [*CLI, "nameserver", *cluster.ns], "ready at")
    cluster.broker("a", extra=("--memory",))
    ns.wait_for(r"INFO .*refused a connection from .*: no credential")
    assert ns.count(r"WARNING .*refused a connection") == 0, ns.output()


def test_a_broker_waits_for_a_frozen_name_server_instead_of_taking_its_port(
    cluster: Cluster,
) -> None:
    """A name server that holds its port without answering was taken for none: the broker
    tried to embed one on that port and exited with "Address already in use", leaving its
    channels unserved (session 33's Jepsen probe, 3 of 3)."""
    ns = cluster.start("ns", [*CLI, "nameserver", *cluster.ns], "ready at")
    os.kill(ns.popen.pid, signal.SIGSTOP)
    thaw = threading.Timer(8.0, os.kill, (ns.popen.pid, signal.SIGCONT))
    thaw.start()  # past the broker's first look (a 5 s timeout)
    try:
        broker = cluster.start("b1", [*CLI, "serve", *cluster.ns, "--memory"], None)
        broker.wait_for(r"does not answer .* though its port is held: waiting for it", 30.0)
        broker.wait_for(r"broker b1 ready at", 60.0)
    finally:
        thaw.join()
    assert "using the name server at" in broker.output()
    assert "Address already in use" not in broker.output()


def test_a_second_signal_stops_a_broker_at_once(cluster: Cluster) -> None:
    """A clean stop may wait (here on a frozen name server, 5 s); the second signal is the
    way out, as for every command (a name server's ignored it, session 33's Jepsen probe)."""
    ns = cluster.start("ns", [*CLI, "nameserver", *cluster.ns], "ready at")
    broker = cluster.broker("a", extra=("--memory",))
    os.kill(ns.popen.pid, signal.SIGSTOP)
    try:
        broker.popen.send_signal(signal.SIGTERM)
        broker.wait_for(r"stopping broker b1 \(a second signal quits at once\)")
        broker.popen.send_signal(signal.SIGTERM)
        assert broker.popen.wait(4.0) == 130  # before the name server's 5 s timeout
    finally:
        os.kill(ns.popen.pid, signal.SIGCONT)
    broker.kill()  # joins the output reader
    assert "stopping now: acks not written yet come back as redeliveries" in broker.output()
