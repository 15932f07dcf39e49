"""Issue 14, running a broker: `forget` and its exit codes, members expiring in a real
broker, `--advertise` in the name server, `serve --config` with a flag over it, and the
rates `status` shows. Real processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from channel_client.cli_common import (
    EXIT_NOT_AUTHORIZED,
    EXIT_NOT_SUBSCRIBED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
)
from channel_client.lookup import resolve_channel
from channel_server.users import Action, Grant, UsersFile
from channel_server.wire import broker_ns_name, channel_ns_name, locate_ns, make_proxy
from tests.integration.conftest import channel_stats, publisher_for
from tests.integration.procs import Cluster, wait_until

pytestmark = pytest.mark.integration
CLI = ["-m", "channel_server"]


def subscribe(cluster: Cluster, channel: str, *member_ids: str) -> None:
    """Pull members (no process of their own: they are active until the pull timeout)."""
    uri = resolve_channel("127.0.0.1", cluster.ns_port, channel)
    with make_proxy(uri, 5.0) as proxy:
        for member_id in member_ids:
            proxy.subscribe(member_id)


def members(cluster: Cluster, channel: str) -> dict[str, bool]:
    """member id -> active, of the default group."""
    group = channel_stats(cluster, channel)["groups"]["default"]
    return {m["id"]: m["active"] for m in group["members"]}


def forget(cluster: Cluster, *args: str) -> tuple[int, str]:
    """Run `forget`; its exit code and its one line (stdout or stderr)."""
    result = cluster.run([*CLI, "forget", *cluster.ns, *args])
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], result.stdout + result.stderr
    return result.returncode, lines[0]


def test_forget_removes_members_with_the_documented_exit_codes(cluster: Cluster) -> None:
    users = UsersFile()
    users.add("bob", "bob-secret-22", (Grant("orders", frozenset({Action.SUBSCRIBE})),))
    users.save(cluster.tmp / "users.yaml")
    bob = cluster.tmp / "bob.yaml"
    bob.write_text(yaml.safe_dump({"user": "bob", "password": "bob-secret-22"}))
    bob.chmod(0o600)
    extra = ("--users", str(cluster.tmp / "users.yaml"), "--pull-timeout", "60")
    cluster.broker("orders", extra=(*extra, "--member-expiry", "0"))
    subscribe(cluster, "orders", "p1", "p2")

    assert forget(cluster, "orders", "nobody") == (
        EXIT_NOT_SUBSCRIBED,
        "error: 'nobody' is not subscribed to 'orders'",
    )
    code, line = forget(cluster, "orders", "p1")
    assert code == EXIT_REFUSED
    assert line.startswith("error: 'p1' is active in group 'default' of 'orders': stop it")
    assert line.endswith("(--force)")
    code, line = forget(cluster, "orders", "p1", "--force", "--credentials", str(bob))
    assert (code, line) == (
        EXIT_NOT_AUTHORIZED,
        "error: not authorized: user 'bob' may not: admin on channel 'orders'",
    )
    assert members(cluster, "orders") == {"p1": True, "p2": True}
    assert forget(cluster, "orders", "p1", "--force") == (
        EXIT_OK,
        "orders: p1 forgotten from group default (it was active: its 0 partitions and 0 "
        "events in flight go to the others)",
    )
    assert members(cluster, "orders") == {"p2": True}
    assert forget(cluster, "nowhere", "p2")[0] == EXIT_USAGE  # unknown channel: bad input


def test_the_broker_forgets_an_inactive_member_after_the_expiry(cluster: Cluster) -> None:
    broker = cluster.broker("jobs", extra=("--pull-timeout", "0.5", "--member-expiry", "1.5"))
    subscribe(cluster, "jobs", "p1")
    wait_until(lambda: members(cluster, "jobs") == {"p1": False}, 10, "p1 timed out")
    wait_until(lambda: members(cluster, "jobs") == {}, 10, "p1 forgotten")
    broker.wait_for(r"jobs: p1 forgotten from group default: inactive with no sign of life")
    subscribe(cluster, "jobs", "p1")  # back, as a new member
    assert members(cluster, "jobs") == {"p1": True}


def test_the_name_server_hands_out_the_advertised_host_and_clients_use_it(
    cluster: Cluster,
) -> None:
    extra = ("--memory", "--host", "127.0.0.1", "--advertise", "localhost")
    broker = cluster.broker("orders", extra=extra)
    assert re.search(r"ready at PYRO:\S+@localhost:\d+;", broker.output())
    with locate_ns("127.0.0.1", cluster.ns_port) as ns:
        for name in (channel_ns_name("orders"), broker_ns_name("b1")):
            assert ns.lookup(name).host == "localhost"
    with publisher_for(cluster, "orders") as pub:
        assert pub.publish([pub.event(i) for i in range(3)])["accepted"] == 3
    assert channel_stats(cluster, "orders")["accepted"] == 3


def test_a_config_file_under_flags_and_the_rates_status_shows(cluster: Cluster) -> None:
    # Given a file naming a channel, a capacity and a rate window
    path = cluster.tmp / "broker.toml"
    path.write_text('channel = ["orders"]\ncapacity = 50\nrate_window = 5\nmemory = true\n')
    # When a broker starts with it and a flag over it
    argv = [*CLI, "serve", *cluster.ns, "--config", str(path), "--capacity", "40"]
    cluster.start("broker", argv, r"broker \S+ ready at")
    with publisher_for(cluster, "orders") as pub:
        pub.publish([pub.event(i) for i in range(3)])
    # Then the file's channel exists, with the flag's capacity
    stats = channel_stats(cluster, "orders")
    assert (stats["capacity"], stats["accepted"]) == (40, 3)
    # and status shows the rates beside the counts, in text and in JSON
    wait_until(lambda: channel_stats(cluster, "orders")["rates"], 10, "a first sample")
    text = cluster.run([*CLI, "status", "orders", *cluster.ns])
    assert text.returncode == EXIT_OK, text.stderr
    rates_line = r"\n  \d+\.\d ev/s in, \d+\.\d ev/s acked over the last [\d.]+ s\n"
    assert re.search(rates_line, text.stdout), text.stdout
    raw = cluster.run([*CLI, "status", "orders", *cluster.ns, "--json"])
    rates: dict[str, Any] = json.loads(raw.stdout)[0]["rates"]
    assert set(rates) == {"interval_s", "accepted_per_s", "acked_per_s"}
    assert 0 < rates["interval_s"] <= 5.0


def test_binding_everywhere_without_an_advertised_host_is_refused(cluster: Cluster) -> None:
    argv = [*CLI, "serve", *cluster.ns, "--memory", "--host", "0.0.0.0", "--insecure"]
    result = cluster.run(argv)
    assert result.returncode == EXIT_USAGE
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (  # after --insecure's warning
        "error: --advertise: --host 0.0.0.0 listens on every interface, but is no address a "
        "client can connect to: give the host clients should use (--advertise HOST)"
    )


def _cpus_of(pid: int) -> list[list[int]]:
    """The CPUs each thread of a process may run on (its Cpus_allowed_list), distinct."""
    found: list[list[int]] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:") and (cpus := _cpu_list(line)) not in found:
                found.append(cpus)
    return found


def _cpu_list(line: str) -> list[int]:
    """``Cpus_allowed_list:\t0-2,5`` -> [0, 1, 2, 5]."""
    cpus: list[int] = []
    for part in line.split(":", 1)[1].strip().split(","):
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


def test_a_broker_runs_its_threads_on_one_cpu_unless_told_otherwise(cluster: Cluster) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    pinned = cluster.broker("orders", extra=("--memory",))
    loose = cluster.broker(
        "news", extra=("--memory", "--cpu", "all", "--broker-id", "b2"), name="loose"
    )
    assert _cpus_of(loose.popen.pid) == [allowed]
    if len(allowed) > 1:
        ((cpu,),) = _cpus_of(pinned.popen.pid)  # every thread, the same one CPU
        assert cpu in allowed
        pinned.wait_for(rf"pinned to CPU {cpu} of \[")
    refused = cluster.run([*CLI, "serve", *cluster.ns, "--memory", "--cpu", "4096"])
    assert refused.returncode == EXIT_USAGE
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: --cpu: CPU 4096 is not one this process may use {allowed}"
    )


def test_the_ready_line_says_where_the_channels_are_kept(cluster: Cluster) -> None:
    """The default data dir is relative to the current directory: a broker started again
    from another one found no channels, and nothing said where it had looked (session
    36's newcomer). The ready line names the store, whole, and a new data dir as new."""
    where = cluster.data_dir("broker")
    first = cluster.broker("jobs")
    assert f"channels: jobs; data dir {where.resolve()} (new)" in first.output()
    first.terminate()
    again = cluster.broker(name="broker")
    assert again.output().rstrip().endswith(f"channels: jobs; data dir {where.resolve()}")
    memory = cluster.broker(name="m", extra=("--memory", "--broker-id", "m"))
    assert "channels: -; store memory (nothing kept)" in memory.output()
