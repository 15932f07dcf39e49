"""Every command's --help, one-line refusals of bad flags, and scenario A5 via `list`
(scenario ids: docs/scenarios.md)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess

import pytest

from channel_server.wire import NS_NOT_REACHABLE
from tests.integration.conftest import channel_stats
from tests.integration.procs import PROJECT_ROOT, Cluster, free_port, wait_until

pytestmark = pytest.mark.integration

HELP_COMMANDS = [
    ["-m", "channel_server", "--help"],
    ["-m", "channel_server", "serve", "--help"],
    ["-m", "channel_server", "list", "--help"],
    ["-m", "publisher", "--help"],
    ["-m", "publisher", "publish", "--help"],
    ["-m", "subscriber", "--help"],
    ["-m", "subscriber", "run", "--help"],
    ["-m", "channel_server", "status", "--help"],
    ["-m", "channel_server", "dead-letters", "--help"],
    ["-m", "channel_server", "forget", "--help"],
    ["-m", "publisher", "put", "--help"],
    ["-m", "publisher", "script", "--help"],
    ["-m", "subscriber", "subscribe", "--help"],
    ["-m", "subscriber", "unsubscribe", "--help"],
    ["-m", "subscriber", "get", "--help"],
    ["-m", "subscriber", "topics", "--help"],
    ["-m", "subscriber", "script", "--help"],
    ["-m", "spark_partitions", "--help"],
    ["-m", "spark_partitions", "plan", "--help"],
    ["-m", "spark_partitions", "generate", "--help"],
]

PUBLISH = ["-m", "publisher", "publish", "--channel", "c", "--id", "P"]

BAD_FLAGS = [
    (["-m", "channel_server", "serve", "--capacity", "0"], "--capacity"),
    (["-m", "channel_server", "serve", "--ns-port", "70000"], "--ns-port"),
    (["-m", "channel_server", "serve", "--ack-timeout", "nan"], "--ack-timeout"),
    (["-m", "channel_server", "serve", "--channel", "bad name"], "channel"),
    (["-m", "publisher", "publish", "--channel", "c", "--id", "P", "--count", "-1"], "--count"),
    (["-m", "publisher", "publish", "--channel", "c", "--id", "P"], "--count"),
    (["-m", "subscriber", "run", "--channel", "c", "--id", "s", "--prefetch", "x"], "--prefetch"),
    (["-m", "subscriber", "run", "--channel", "c", "--id", "bad/id"], "id"),
    (["-m", "subscriber", "run", "--channel", "c", "--id", "s", "--fault", "boom:1"], "boom"),
    (["-m", "channel_server", "serve", "--sync", "sometimes"], "--sync"),
    (["-m", "channel_server", "serve", "--memory", "--data-dir", "x"], "--data-dir"),
    ([*PUBLISH, "--count", "1", "--file", "f"], "--file"),
    ([*PUBLISH, "--file", "f", "--spark", "maybe"], "--spark"),
    (["-m", "publisher", "put", "t", "m", "--id", "P", "--attempts", "0"], "--attempts"),
    (["-m", "subscriber", "get", "bad topic", "--id", "s"], "topic"),
]


@pytest.mark.parametrize("argv", HELP_COMMANDS, ids=lambda a: " ".join(a[1:]))
def test_help_works(cluster: Cluster, argv: list[str]) -> None:
    result = cluster.run(argv)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    assert "--help" in result.stdout


@pytest.mark.parametrize("argv,flag", BAD_FLAGS, ids=lambda a: str(a))
def test_bad_flag_exits_non_zero_with_one_line(cluster: Cluster, argv: list[str], flag: str):
    result = cluster.run(argv)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert flag in lines[0]
    assert "Traceback" not in result.stderr


def test_no_name_server_is_a_clear_one_line_error(cluster: Cluster) -> None:
    result = cluster.run(["-m", "channel_server", "list", *cluster.ns])
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [
        f"error: name server 127.0.0.1:{cluster.ns_port}: {NS_NOT_REACHABLE}"
    ]
    assert "start a broker, `python -m channel_server serve`" in result.stderr


def test_an_address_in_use_is_named(cluster: Cluster) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]  # bound, not listening: nothing answers there
        broker = cluster.run(
            ["-m", "channel_server", "serve", *cluster.ns, "--memory", "--port", str(port)]
        )
        ns = cluster.run(["-m", "channel_server", "nameserver", "--ns-port", str(port)])
    assert broker.returncode == ns.returncode == 3
    assert f"broker at 127.0.0.1:{port}: Address already in use" in broker.stderr
    assert f"name server at 127.0.0.1:{port}: Address already in use" in ns.stderr


def listed(cluster: Cluster) -> list[dict]:
    result = cluster.run(["-m", "channel_server", "list", *cluster.ns, "--json"])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a5_listing_shows_two_then_three_channels(cluster: Cluster) -> None:
    cluster.broker("alpha", "beta")
    assert [row["channel"] for row in listed(cluster)] == ["alpha", "beta"]
    result = cluster.run(
        [
            "-m",
            "publisher",
            "publish",
            *cluster.ns,
            "--channel",
            "gamma",
            "--id",
            "P",
            "--count",
            "3",
            "--create",
        ]
    )
    assert result.returncode == 0, result.stderr
    rows = wait_until(lambda: (r := listed(cluster)) and len(r) == 3 and r, what="3 channels")
    assert [row["channel"] for row in rows] == ["alpha", "beta", "gamma"]
    assert all(row["broker"] == "b1" for row in rows)
    assert rows[2]["backlog"] == 3
    text = cluster.run(["-m", "channel_server", "list", *cluster.ns]).stdout.splitlines()
    assert len(text) == 3
    assert text[2].startswith("gamma  broker=b1  groups=1  members=0  backlog=3")


def test_broker_stops_cleanly_on_sigterm(cluster: Cluster) -> None:
    broker = cluster.broker("x")
    assert broker.terminate() == 0
    assert "broker b1 stopped" in broker.output()


def test_a_hang_up_stops_a_broker_cleanly_too(cluster: Cluster) -> None:
    """SIGHUP (its terminal gone, an operator's "reload") killed it at once, with no clean
    stop and nothing in its log (session 33's operator probe)."""
    broker = cluster.broker("x")
    broker.popen.send_signal(signal.SIGHUP)
    assert broker.popen.wait(30.0) == 0
    broker.kill()  # joins the output reader
    assert "broker b1 stopped" in broker.output()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_publish_cleanly_with_what_was_done(cluster: Cluster, signum) -> None:
    cluster.broker("jobs")
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "jobs", "--id", "P"]
    pub = cluster.start("publisher", [*argv, "--count", "100000", "--rate", "200"], None)
    wait_until(lambda: channel_stats(cluster, "jobs")["accepted"] > 0, 15.0, "a first batch")
    pub.popen.send_signal(signum)
    assert pub.popen.wait(15.0) == 130
    pub.kill()  # joins the output reader
    assert "Traceback" not in pub.output()
    summary = pub.wait_for(
        r"P -> jobs: (\d+) accepted.*\(([\d.]+) events/s\) \(interrupted: the rest was not sent\)"
    )
    assert 0 < int(summary.group(1)) < 100000
    assert int(summary.group(1)) == channel_stats(cluster, "jobs")["accepted"]
    assert float(summary.group(2)) < 400  # what was sent, at --rate 200: not the 100,000 asked
    assert not list((cluster.tmp / "state").rglob("*.tmp"))


def test_a_second_signal_stops_a_subscriber_at_once_while_its_broker_is_away(
    cluster: Cluster,
) -> None:
    """The graceful stop waits for the broker (to send its acks and unsubscribe); with the
    broker gone that wait is long, and a second signal is the way out."""
    broker = cluster.broker("away")
    sub = cluster.subscriber("away", "s1")
    broker.kill()
    sub.popen.send_signal(signal.SIGTERM)
    sub.wait_for(r"Ctrl-C again to quit at once")
    sub.popen.send_signal(signal.SIGTERM)
    assert sub.popen.wait(10) == 130
    sub.wait_for(r"stopping now: events not acknowledged yet will be delivered again")


def test_the_run_scripts_read_relative_paths_from_where_they_are_called(cluster: Cluster) -> None:
    """README's tour runs scripts/run_*.sh; a file named relative to the caller's directory
    is found there (the scripts once changed into the project's)."""
    (cluster.tmp / "broker.toml").write_text('channel = ["from-the-file"]\nmemory = true\n')
    script = PROJECT_ROOT / "scripts" / "run_broker.sh"
    result = subprocess.run(
        [str(script), "--config", "broker.toml", "--print-config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cluster.tmp,
        env=cluster.env,
    )
    assert result.returncode == 0, result.stderr
    assert 'channel = ["from-the-file"]' in result.stdout


def test_one_signal_with_the_broker_gone_leaves_after_the_wait_and_says_so(
    cluster: Cluster,
) -> None:
    """The goodbye waits a bounded time for the broker, then the subscriber leaves and says
    what that means (it used to leave in silence)."""
    broker = cluster.broker("gone")
    sub = cluster.subscriber("gone", "s1")
    broker.kill()
    sub.popen.send_signal(signal.SIGTERM)
    assert sub.popen.wait(30) == 0
    sub.wait_for(r"the channel did not answer within 10 s: left without its goodbye")


def test_a_publish_stopped_by_an_error_says_what_it_had_done(cluster: Cluster) -> None:
    """The broker dies in the middle of a run: the publisher gives up after --retry-for,
    and says how many events were accepted before (it printed only the error)."""
    broker = cluster.broker("jobs")
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "jobs", "--id", "P"]
    argv += ["--count", "100000", "--rate", "500", "--retry-for", "1", "--json"]
    pub = cluster.start("publisher", argv, None)
    wait_until(lambda: channel_stats(cluster, "jobs")["accepted"] >= 100, 15.0, "100 accepted")
    broker.kill()
    assert pub.popen.wait(30) == 3
    summary = pub.wait_for(r"P -> jobs: (\d+) accepted.* before an error stopped it")
    figures = json.loads(pub.wait_for(r"^\{.*\"error\": true.*\}$").group(0))
    assert figures["accepted"] == int(summary.group(1)) >= 100


def test_a_subscriber_takes_its_callback_port_and_waits_for_its_channel(cluster: Cluster) -> None:
    """Its callback bound a port of the system's choosing, which a firewall cannot let
    through, and one started before its channel existed exited at once, though the library
    could wait (session 33's operator probe)."""
    port = free_port()
    run = ["-m", "subscriber", "run", *cluster.ns, "--channel", "later", "--port", str(port)]
    sub = cluster.start("s1", [*run, "--id", "s1", "--wait-for-channel", "30", "--quiet"], None)
    sub.wait_for(r"waiting for channel later")
    cluster.broker("later")  # its name server and the channel come up after
    sub.wait_for(rf"subscriber s1 ready on channel later .* at PYRO:\S+@127\.0\.0\.1:{port}")
    taken = cluster.run([*run, "--id", "s2"])
    assert taken.returncode == 2, taken.stderr
    assert f"callback at 127.0.0.1:{port}" in taken.stderr.strip().splitlines()[-1]


def test_move_and_rebalance_say_what_is_wrong_on_brokers_that_cannot_move(
    cluster: Cluster,
) -> None:
    """A channel that never existed was "not served by any broker now" (exit 1), and
    rebalance over SQLite brokers said "balanced: 2 channels over 0 brokers" (session 33's
    operator probe)."""
    cluster.broker("a", "b")
    nochan = cluster.run(["-m", "channel_server", "move", "nochan", "--to", "b1", *cluster.ns])
    assert (nochan.returncode, nochan.stderr.strip()) == (2, "error: unknown channel 'nochan'")
    dry = cluster.run(["-m", "channel_server", "rebalance", "--dry-run", *cluster.ns])
    assert dry.returncode == 2
    assert "rebalancing needs brokers sharing a database" in dry.stderr


def test_a_group_s_only_subscriber_restarted_with_keep_subscription_loses_nothing(
    cluster: Cluster,
) -> None:
    """A clean stop unsubscribes, and the last member of a group other than 'default'
    takes the group and its backlog with it: a rolling restart of a group's only worker
    dropped what was published meanwhile (session 34's Jepsen probe). --keep-subscription
    keeps the membership across the restart."""
    cluster.broker("orders")
    kept = ("--group", "billing", "--keep-subscription")
    assert cluster.subscriber("orders", "b1", *kept).terminate() == 0
    publish = [*cluster.ns, "--channel", "orders", "--id", "P", "--count", "5"]
    assert cluster.run(["-m", "publisher", "publish", *publish]).returncode == 0
    again = cluster.subscriber("orders", "b1", *kept)
    assert len(cluster.wait_for_records("orders", ("b1",), 5)["b1"]) == 5
    assert again.terminate() == 0
    assert "billing" in channel_stats(cluster, "orders")["groups"]  # still subscribed
    assert cluster.subscriber("orders", "b2", "--group", "other").terminate() == 0
    assert "other" not in channel_stats(cluster, "orders")["groups"]  # unsubscribed
