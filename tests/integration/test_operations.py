"""Issue 14, running a broker: `forget` and its exit codes, and members expiring in a real
broker. Real processes on 127.0.0.1."""

from __future__ import annotations

import pytest
import yaml

from channel_server.cli_common import (
    EXIT_NOT_AUTHORIZED,
    EXIT_NOT_SUBSCRIBED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
)
from channel_server.lookup import resolve_channel
from channel_server.users import Action, Grant, UsersFile
from channel_server.wire import make_proxy
from tests.integration.conftest import channel_stats
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
