"""Strangers kept out: the attacks of the security review, each run with real processes,
once by a client with no credential and once by a user whose credential lacks the
permission. Each is refused with a typed error (NotAuthorized) and logged by the broker;
the owner's happy path keeps working beside them."""

from __future__ import annotations

import contextlib
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import Pyro5.client
import Pyro5.core
import Pyro5.errors
import Pyro5.server
import pytest
import yaml

from channel_client.lookup import resolve_channel
from channel_server.credentials import Credential, ensure_token
from channel_server.errors import LimitReached, NotAuthorized
from channel_server.store.sqlite import DB_FILE
from channel_server.users import Action, Grant, UsersFile
from channel_server.wire import (
    ANONYMOUS,
    NS_BROKER_PREFIX,
    NS_CHANNEL_PREFIX,
    NS_OBJECT,
    as_refusal,
    locate_ns,
    make_proxy,
)
from tests.integration.conftest import bind_or_refusal, publisher_for
from tests.integration.procs import Cluster, free_port, logged, wait_until

pytestmark = pytest.mark.integration
PASSWORDS = {"alice": "alice-secret-1", "bob": "bob-secret-22", "alice-x": "alice-x-secret-3"}
GRANTS = {
    "alice": (Grant("orders*", frozenset({Action.PUBLISH, Action.SUBSCRIBE})),),
    "bob": (Grant("orders*", frozenset({Action.SUBSCRIBE})),),
    "alice-x": (Grant("orders*", frozenset({Action.PUBLISH})),),
}


def who(name: str) -> Credential:
    return Credential(name, PASSWORDS[name])


@pytest.fixture
def secured(cluster: Cluster) -> Iterator[tuple[Cluster, Any]]:
    """A broker with users alice (publish, subscribe), bob (subscribe) and alice-x
    (publish) on orders*."""
    users = UsersFile()
    for name, password in PASSWORDS.items():
        users.add(name, password, GRANTS[name])
    path = cluster.tmp / "users.yaml"
    users.save(path)
    broker = cluster.broker("orders", "orders.news", extra=("--users", str(path)))
    yield cluster, broker


def call(uri: str, credential: Credential, method: str, *args: Any) -> Any:
    """One call as ``credential``; a refused connection comes back as NotAuthorized."""
    try:
        with make_proxy(uri, 5.0, credential) as proxy:
            return getattr(proxy, method)(*args)
    except Pyro5.errors.CommunicationError as exc:
        raise as_refusal(exc) or exc from None


def channel_uri(cluster: Cluster, channel: str = "orders") -> str:
    return resolve_channel("127.0.0.1", cluster.ns_port, channel)


def test_nobody_without_a_credential_gets_in(secured: tuple[Cluster, Any]) -> None:
    cluster, broker = secured
    with pytest.raises(NotAuthorized, match="no credential"):
        locate_ns("127.0.0.1", cluster.ns_port, credential=ANONYMOUS)
    with pytest.raises(NotAuthorized, match="no credential"):
        call(channel_uri(cluster), ANONYMOUS, "publish", [])
    with pytest.raises(NotAuthorized, match="wrong credential"):
        call(channel_uri(cluster), Credential("alice", "guess"), "stats")
    # logged, once per 10 s with the count left out (a stranger cannot fill the disk)
    wait_until(lambda: broker.count(r"refused a connection from 127\.0\.0\.1") >= 1, 5)
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "orders", "--id", "EVE"]
    elsewhere = {"PUBSUB_STATE_DIR": str(cluster.tmp / "another-os-user")}
    stranger = cluster.run([*argv, "--count", "1"], env=elsewhere)
    assert stranger.returncode == 6
    assert stranger.stderr.strip().splitlines()[-1] == "error: not authorized: no credential"


def test_only_brokers_change_the_name_server(secured: tuple[Cluster, Any]) -> None:
    cluster, broker = secured
    with locate_ns("127.0.0.1", cluster.ns_port, credential=who("alice")) as ns:
        assert NS_CHANNEL_PREFIX + "orders" in ns.list(prefix=NS_CHANNEL_PREFIX)
        with pytest.raises(NotAuthorized, match="remove names"):
            ns.remove(prefix="pubsub.")
        with pytest.raises(NotAuthorized, match="register"):
            ns.register(NS_CHANNEL_PREFIX + "orders", "PYRO:fake@127.0.0.1:1")
        with pytest.raises(NotAuthorized, match="regex"):
            ns.list(regex="(a+)+$")
    logged(broker, r"refused register 'pubsub\.channel\.orders'.* to user alice", 1)
    with publisher_for(cluster, "orders") as pub:  # the owner's channel still resolves
        assert pub.publish([pub.event("ok")])["accepted"] == 1


def test_a_user_publishes_only_where_it_may(secured: tuple[Cluster, Any]) -> None:
    cluster, broker = secured
    event = {"id": "a-1", "publisher_id": "alice", "timestamp": 1.0}
    with pytest.raises(NotAuthorized, match="may not: publish on channel 'orders'"):
        call(channel_uri(cluster), who("bob"), "publish", [event])
    assert call(channel_uri(cluster), who("alice"), "publish", [event])["accepted"] == 1
    logged(broker, r"refused publish on channel 'orders' to user bob", 1)


def test_a_user_publishes_only_as_its_own_publisher_ids(secured: tuple[Cluster, Any]) -> None:
    """Ids are unique per publisher id: a user that could publish as another's id could
    publish that one's next ids first, and its events would then be refused as duplicates."""
    cluster, broker = secured
    uri = channel_uri(cluster)

    def publish_as(publisher_id: str, credential: Credential | None) -> dict[str, Any]:
        event = {"id": "o-1", "publisher_id": publisher_id, "timestamp": 1.0}
        return call(uri, credential, "publish", [event])

    for theirs in ("owner-feed", "bob", "alicex"):
        with pytest.raises(NotAuthorized, match=f"may not: publish as '{theirs}'"):
            publish_as(theirs, who("alice"))
        with pytest.raises(NotAuthorized, match=f"may not: publish as '{theirs}'"):
            call(uri, who("alice"), "outstanding", theirs)
    for mine in ("alice", "alice-feed", "alice.orders"):
        assert publish_as(mine, who("alice"))["accepted"] == 1
        assert call(uri, who("alice"), "outstanding", mine)["queued"] == 1
    assert publish_as("owner-feed", None)["accepted"] == 1  # not taken by alice's attempt
    logged(broker, r"refused publish as 'bob' .* to user alice", 2)  # publish, outstanding
    # alice's ids extend her name, but not into user alice-x's: those are alice-x's alone
    # (before, alice published alice-x.1 first and alice-x's own event was a "duplicate")
    with pytest.raises(NotAuthorized, match="it is user 'alice-x''s publisher id"):
        publish_as("alice-x.1", who("alice"))
    assert publish_as("alice-x.1", who("alice-x"))["accepted"] == 1
    with pytest.raises(NotAuthorized, match="may not: publish as 'alice'"):
        publish_as("alice", who("alice-x"))


def test_a_subscriber_id_belongs_to_its_user(secured: tuple[Cluster, Any]) -> None:
    cluster, broker = secured
    owner_sub = cluster.subscriber("orders", "s1")
    with pytest.raises(NotAuthorized, match="belongs to another user"):
        call(channel_uri(cluster), who("bob"), "unsubscribe", "s1")
    with pytest.raises(NotAuthorized, match="belongs to another user"):
        call(channel_uri(cluster), who("bob"), "subscribe", "s1", None)
    with pytest.raises(NotAuthorized, match="belongs to another user"):
        call(channel_uri(cluster), who("bob"), "heartbeat", "s1", "default", 1)
    assert call(channel_uri(cluster), who("bob"), "memberships", "s1") == []  # not bob's
    mine = call(channel_uri(cluster), None, "memberships", "s1")  # the owner's own id
    assert [(m["group"], m["mode"]) for m in mine] == [("default", "push")]
    with publisher_for(cluster, "orders") as pub:
        pub.publish([pub.event(n) for n in range(3)])
    assert len(cluster.wait_for_records("orders", ("s1",), 3)["s1"]) == 3
    assert owner_sub.alive
    logged(broker, r"belongs to another user", 3)


def test_another_users_topic_messages_cannot_be_read(secured: tuple[Cluster, Any]) -> None:
    cluster, _ = secured
    topic = channel_uri(cluster, "orders.news")
    assert call(topic, who("alice"), "subscribe", "a1", None)["mode"] == "pull"
    message = {"id": "m-1", "publisher_id": "alice", "timestamp": 1.0}
    call(topic, who("alice"), "publish", [message])
    with pytest.raises(NotAuthorized, match="belongs to another user"):
        call(topic, who("bob"), "get", "a1")
    reply = call(topic, who("alice"), "get", "a1")
    assert reply["event"]["id"] == "m-1"  # still there for its owner: bob consumed nothing


def test_another_users_group_cannot_be_joined(secured: tuple[Cluster, Any]) -> None:
    """A group is its subscribers' users' subscription: bob joining alice's group with an
    id of his own took a share of her events (session 32). The default group stays
    shared: competing consumers of any user that may subscribe."""
    cluster, _ = secured
    uri = channel_uri(cluster, "orders.news")
    assert call(uri, who("alice"), "subscribe", "a1", None, "audit")["group"] == "audit"
    with pytest.raises(NotAuthorized, match=r"join group 'audit' .*another user's"):
        call(uri, who("bob"), "subscribe", "b1", None, "audit")
    assert call(uri, who("alice"), "subscribe", "a2", None, "audit")["group"] == "audit"
    assert call(uri, None, "subscribe", "o1", None, "audit")["group"] == "audit"  # an admin
    call(uri, who("alice"), "subscribe", "a3", None)
    assert call(uri, who("bob"), "subscribe", "b2", None)["group"] == "default"


def test_dead_letters_need_the_admin_permission(secured: tuple[Cluster, Any]) -> None:
    cluster, _ = secured
    cluster.subscriber("orders", "s1", "--fault", "fail-on:PUB-1")
    with publisher_for(cluster, "orders") as pub:
        pub.publish([pub.event("card=4111-1111")])
    uri = channel_uri(cluster)
    owner = None  # the local token: this process is the broker's OS user
    wait_until(lambda: len(call(uri, owner, "dead_letters")) == 1, what="the dead letter")
    for name in ("alice", "bob"):
        with pytest.raises(NotAuthorized, match="admin on channel 'orders'"):
            call(uri, who(name), "dead_letters")
        with pytest.raises(NotAuthorized, match="admin on channel 'orders'"):
            call(uri, who(name), "replay_dead_letters", None)
    assert call(uri, owner, "dead_letters")[0]["payload"] == "card=4111-1111"


def test_a_forged_push_to_a_subscriber_is_refused(secured: tuple[Cluster, Any]) -> None:
    cluster, _ = secured
    sub = cluster.subscriber("orders", "s1")
    callback = sub.wait_for(r"at (PYRO:\S+)").group(1)
    forged = {"session": 1, "seq": 1, "events": [{"id": "PUB-1", "publisher_id": "PUB"}]}
    for credential in (ANONYMOUS, None, who("alice")):  # nobody but the broker
        with pytest.raises(NotAuthorized, match="admits only the broker"):
            call(callback, credential, "deliver", forged)
    # Logged by the subscriber as it refuses (once per 10 s with the count left out: a
    # stranger cannot fill its disk); its output is read by another thread.
    wait_until(lambda: sub.count(r"refused a connection") == 1, what="the refusals logged")
    with publisher_for(cluster, "orders") as pub:
        pub.publish([pub.event("real")])  # the real PUB-1 is handled: nothing forged got in
    assert [r["id"] for r in cluster.wait_for_records("orders", ("s1",), 1)["s1"]] == ["PUB-1"]


def test_a_name_server_that_admits_strangers_is_refused(cluster: Cluster) -> None:
    port = free_port()
    stock = cluster.start(
        "pyro5-ns", ["-m", "Pyro5.nameserver", "-n", "127.0.0.1", "-p", str(port)], r"URI ="
    )
    serve = ["-m", "channel_server", "serve", "--ns-port", str(port), "--memory"]
    refused = cluster.run(serve, timeout_s=30)
    assert refused.returncode == 6, refused.stderr
    assert "lets anyone change its names" in refused.stderr.strip().splitlines()[-1]
    insecure = cluster.start("b-insecure", [*serve, "--insecure-name-server"], r"ready at")
    assert insecure.count(r"does not authenticate") == 1
    assert stock.alive


def test_data_and_state_files_are_private(secured: tuple[Cluster, Any]) -> None:
    cluster, _ = secured
    with publisher_for(cluster, "orders") as pub:
        pub.publish([pub.event("x")])
    data, state = cluster.data_dir("broker"), cluster.tmp / "state"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    files = [p for p in [*data.iterdir(), *state.iterdir()] if p.is_file()]
    assert {p.name for p in files} >= {"channels.sqlite", "channels.sqlite-wal", "token"}
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: 0o600 for p in files}


def test_a_credentials_file_connects_a_cli_as_its_user(secured: tuple[Cluster, Any]) -> None:
    cluster, _ = secured
    creds = cluster.tmp / "bob.yaml"
    creds.write_text(yaml.safe_dump({"user": "bob", "password": PASSWORDS["bob"]}))
    creds.chmod(0o600)
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "orders", "--id", "BOB"]
    result = cluster.run([*argv, "--count", "1", "--credentials", str(creds)])
    assert result.returncode == 6
    assert result.stderr.strip().splitlines()[-1] == (
        "error: not authorized: user 'bob' may not: publish on channel 'orders'"
    )


class Squatter(Pyro5.server.Daemon):
    """A process that took a dead subscriber's port: it admits any caller, and keeps what
    the caller says in its handshake and what it is sent."""

    def __init__(self, port: int) -> None:
        super().__init__(host="127.0.0.1", port=port)
        self.handshakes: list[Any] = []
        self.sent: list[Any] = []

    def validateHandshake(self, conn: Any, data: Any) -> Any:
        self.handshakes.append(data)
        return "welcome"


@Pyro5.server.expose
class SquattedCallback:
    def __init__(self, sent: list[Any]) -> None:
        self._sent = sent

    def deliver(self, delivery: Any) -> dict[str, int]:
        self._sent.append(delivery)
        return {"queued": len(delivery.get("events", []))}

    def ping(self) -> str:
        return "pong"


def test_a_process_on_a_dead_subscribers_port_learns_no_secret_and_gets_no_event(
    secured: tuple[Cluster, Any],
) -> None:
    cluster, _ = secured
    sub = cluster.subscriber("orders", "s1")
    callback = sub.wait_for(r"at (PYRO:\S+)").group(1)
    db = cluster.data_dir("broker") / DB_FILE
    secret = wait_until(lambda: member_secret(db, "s1"), what="s1's callback secret stored")
    sub.kill()
    uri = Pyro5.core.URI(callback)
    squatter = Squatter(uri.port)
    squatter.register(SquattedCallback(squatter.sent), uri.object)
    loop = threading.Thread(target=squatter.requestLoop, daemon=True)
    loop.start()
    try:
        with publisher_for(cluster, "orders") as pub:
            pub.publish([pub.event(n) for n in range(5)])
            wait_until(lambda: len(squatter.handshakes) >= 2, what="the broker trying s1 twice")
            assert squatter.sent == []
            assert all(secret not in repr(h) for h in squatter.handshakes)
            cluster.subscriber("orders", "s2")  # the events are not lost: s2 gets them
            records = cluster.wait_for_records("orders", ("s2",), 5, timeout_s=60)
        assert sorted(r["id"] for r in records["s2"]) == [f"PUB-{n}" for n in range(1, 6)]
        assert squatter.sent == []
    finally:
        squatter.shutdown()
        loop.join(5)
        squatter.close()


def member_secret(db: Path, member_id: str) -> str | None:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        row = conn.execute(
            "SELECT secret FROM members WHERE member_id = ?", (member_id,)
        ).fetchone()
    return row[0] if row else None


def test_a_client_sends_no_token_to_a_name_server_that_cannot_prove_it_knows_it(
    cluster: Cluster,
) -> None:
    """Something else on the name server's port (a broker not started yet, or restarting)
    admits anyone: it learns nothing it can use, and the client says why it stopped."""
    token = ensure_token(cluster.tmp / "state")
    impostor = Squatter(free_port())
    impostor.register(SquattedCallback(impostor.sent), NS_OBJECT)
    loop = threading.Thread(target=impostor.requestLoop, daemon=True)
    loop.start()
    try:
        port = str(impostor.sock.getsockname()[1])
        done = cluster.run(["-m", "channel_server", "list", "--ns-port", port])
        assert done.returncode != 0
        assert "did not prove it knows the secret" in done.stderr
        assert impostor.handshakes, "the client did try"
        assert all(token not in repr(h) for h in impostor.handshakes)
        assert all(h.get("user") == "owner" and "proof" in h for h in impostor.handshakes)
    finally:
        impostor.shutdown()
        loop.join(5)
        impostor.close()


def test_a_client_turned_away_for_want_of_a_connection_is_told_the_server_is_busy(
    cluster: Cluster,
) -> None:
    cluster.broker("orders", extra=("--memory", "--max-connections", "2"))
    held = [locate_ns("127.0.0.1", cluster.ns_port) for _ in range(2)]
    try:
        done = cluster.run(["-m", "channel_server", "list", *cluster.ns])
    finally:
        for proxy in held:
            proxy._pyroRelease()
    assert done.returncode != 0
    assert "busy: all 2 connections are in use, retry later" in done.stderr, done.stderr


def test_list_shows_a_user_the_channels_it_may_see(cluster: Cluster) -> None:
    """As the live page does: a channel the user has no permission on is left out, not an
    error that hides the others."""
    users = UsersFile()
    users.add("bob", PASSWORDS["bob"], GRANTS["bob"])
    users.save(cluster.tmp / "users.yaml")
    cluster.broker("orders", "payroll", extra=("--users", str(cluster.tmp / "users.yaml")))
    creds = cluster.tmp / "bob.yaml"
    creds.write_text(yaml.safe_dump({"user": "bob", "password": PASSWORDS["bob"]}))
    creds.chmod(0o600)
    done = cluster.run(["-m", "channel_server", "list", *cluster.ns, "--credentials", str(creds)])
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["orders"]
    with locate_ns("127.0.0.1", cluster.ns_port, credential=who("bob")) as ns:
        assert set(ns.list(prefix=NS_CHANNEL_PREFIX)) == {NS_CHANNEL_PREFIX + "orders"}
        assert NS_CHANNEL_PREFIX + "payroll" not in ns.list()  # not even its name
        assert ns.count() == len(ns.list())
        for name in ("payroll", "nosuch"):  # refused alike, whether it exists or not
            with pytest.raises(NotAuthorized, match=f"no permission on channel '{name}'"):
                ns.lookup(NS_CHANNEL_PREFIX + name)
        broker = ns.lookup(NS_BROKER_PREFIX + "b1")
    with locate_ns("127.0.0.1", cluster.ns_port) as ns:
        payroll = ns.lookup(NS_CHANNEL_PREFIX + "payroll")
    with pytest.raises(NotAuthorized, match="no permission on channel 'payroll'"):
        call(str(payroll), who("bob"), "ping")  # it answered its name to anyone
    assert call(str(broker), who("bob"), "channels") == ["orders"]
    assert call(str(broker), who("bob"), "info")["channels"] == ["orders"]
    assert call(str(broker), None, "channels") == ["orders", "payroll"]
    with locate_ns("127.0.0.1", cluster.ns_port) as ns:  # the owner sees every channel
        assert NS_CHANNEL_PREFIX + "payroll" in ns.list(prefix=NS_CHANNEL_PREFIX)
        assert ns.count() > len(ns.list(prefix=NS_CHANNEL_PREFIX)) >= 2


def _bound(uri: str, credential: Credential) -> Pyro5.client.Proxy | None:
    proxy = bind_or_refusal(uri, credential)
    return None if isinstance(proxy, str) else proxy


def test_one_user_cannot_take_every_connection(cluster: Cluster) -> None:
    """A user of the users file holds at most its share of the broker's connections; the
    others, the owner among them, still get in, and a closed one frees its place."""
    users = UsersFile()
    for name, password in PASSWORDS.items():
        users.add(name, password, GRANTS[name])
    users.save(cluster.tmp / "users.yaml")
    limits = ("--max-connections", "8", "--max-connections-per-user", "3")
    broker = cluster.broker("orders", extra=("--users", str(cluster.tmp / "users.yaml"), *limits))
    uri = channel_uri(cluster)
    held = [bind_or_refusal(uri, who("bob")) for _ in range(3)]
    try:
        assert not any(isinstance(proxy, str) for proxy in held), held
        refused = bind_or_refusal(uri, who("bob"))
        assert isinstance(refused, str)
        assert "user bob has reached its limit of 3 connections" in refused
        logged(broker, r"user bob holds 3 connections: refused one more", 1)
        assert call(uri, who("alice"), "ping")
        listed = cluster.run(["-m", "channel_server", "list", *cluster.ns])
        assert listed.returncode == 0, listed.stderr
        held.pop()._pyroRelease()  # type: ignore[union-attr]
        held.append(wait_until(lambda: _bound(uri, who("bob")), 5, "bob's place freed"))
    finally:
        for proxy in held:
            if not isinstance(proxy, str):
                proxy._pyroRelease()


def test_users_together_cannot_take_the_owners_connections(cluster: Cluster) -> None:
    """Two users at their shares held every connection and the owner's CLI was refused
    as busy (session 32): users together hold at most seven eighths of them."""
    users = UsersFile()
    for name, password in PASSWORDS.items():
        users.add(name, password, GRANTS[name])
    users.save(cluster.tmp / "users.yaml")
    limits = ("--max-connections", "8", "--max-connections-per-user", "4")
    cluster.broker("orders", extra=("--users", str(cluster.tmp / "users.yaml"), *limits))
    uri = channel_uri(cluster)
    held = [bind_or_refusal(uri, who("bob")) for _ in range(4)] + [
        bind_or_refusal(uri, who("alice")) for _ in range(3)
    ]
    try:
        assert not any(isinstance(proxy, str) for proxy in held), held
        refused = bind_or_refusal(uri, who("alice"))
        assert isinstance(refused, str) and "limit of 7 connections of users" in refused
        listed = cluster.run(["-m", "channel_server", "list", *cluster.ns])
        assert listed.returncode == 0, listed.stderr  # the owner's eighth
    finally:
        for proxy in held:
            if not isinstance(proxy, str):
                proxy._pyroRelease()


def test_a_user_removed_from_the_users_file_is_refused_without_a_restart(
    secured: tuple[Cluster, Any],
) -> None:
    """The broker read its users file once: a removed user kept publishing until a
    restart (session 32). Now its next call is refused, on a connection it holds too,
    and a new grant takes effect the same way."""
    cluster, broker = secured
    uri = channel_uri(cluster)
    event = {"id": "o-1", "publisher_id": "alice", "timestamp": 1.0}
    with make_proxy(uri, 5.0, who("alice")) as held:
        assert held.publish([event])["accepted"] == 1
        users = UsersFile.load(cluster.tmp / "users.yaml")
        users.remove("alice")
        users.add("bob", PASSWORDS["bob"], GRANTS["alice"], replace=True)  # now publishes
        users.save(cluster.tmp / "users.yaml")

        def refused() -> bool:
            try:
                held.outstanding("alice")
            except NotAuthorized as exc:
                return "no longer in the users file" in str(exc)
            return False

        wait_until(refused, what="alice's held connection refused")
    with pytest.raises(NotAuthorized, match="wrong credential for user 'alice'"):
        call(uri, who("alice"), "stats")
    bobs = {"id": "b-1", "publisher_id": "bob", "timestamp": 1.0}
    assert call(uri, who("bob"), "publish", [bobs])["accepted"] == 1
    logged(broker, r"users file .* read again: 2 users", 1)


def test_a_subscriber_whose_user_loses_the_grant_is_sent_no_more_events(
    secured: tuple[Cluster, Any],
) -> None:
    """Its calls were refused, but the channel went on pushing to it and taking its acks,
    across a restart too (session 33's operator probe). Now the channel forgets it within
    a housekeeping round of the change, its events go to others, and the subscriber stops
    with an error instead of retrying a refused call for ever."""
    cluster, broker = secured
    argv = ["-m", "subscriber", "run", *cluster.ns, "--channel", "orders", "--id", "bob-1"]
    argv += ["--record", str(cluster.record_path("orders", "bob-1"))]
    env = dict(cluster.env, PUBSUB_USER="bob", PUBSUB_PASSWORD=PASSWORDS["bob"])
    bob = cluster.start("bob-1", argv, r"subscriber bob-1 ready", env)
    with publisher_for(cluster, "orders") as pub:
        pub.publish([pub.event(n) for n in range(5)])
    assert len(cluster.wait_for_records("orders", ("bob-1",), 5)["bob-1"]) == 5
    users = UsersFile.load(cluster.tmp / "users.yaml")
    others = (Grant("elsewhere*", frozenset({Action.SUBSCRIBE})),)
    users.add("bob", PASSWORDS["bob"], others, replace=True)
    users.save(cluster.tmp / "users.yaml")
    logged(broker, r"bob-1 forgotten from group default: its user 'bob' may no longer", 1)
    cluster.subscriber("orders", "s1")
    with publisher_for(cluster, "orders", "PUB2") as pub:
        pub.publish([pub.event(n) for n in range(10)])
    assert len(cluster.wait_for_records("orders", ("s1",), 10)["s1"]) == 10
    assert len(cluster.records("orders", "bob-1")["bob-1"]) == 5
    wait_until(lambda: not bob.alive, what="bob's subscriber to stop")
    assert bob.popen.returncode == 1
    assert "error: the subscriber stopped: NotAuthorized" in bob.output()


def test_one_user_holds_at_most_its_share_of_a_channels_members(cluster: Cluster) -> None:
    """Alice's subscriptions, one group each, held every member slot for good (the last
    member of a group is never replaced), so no one else could subscribe (session 33's
    attacker probe). She now holds half of them; the owner still gets in."""
    users = UsersFile()
    users.add("alice", PASSWORDS["alice"], GRANTS["alice"])
    users.save(cluster.tmp / "users.yaml")
    extra = ("--users", str(cluster.tmp / "users.yaml"), "--max-members", "4", "--memory")
    cluster.broker("orders", extra=extra)
    uri = channel_uri(cluster)
    for n in (1, 2):
        call(uri, who("alice"), "subscribe", f"alice-{n}", None, f"g{n}")
    with pytest.raises(LimitReached, match="members of user alice"):
        call(uri, who("alice"), "subscribe", "alice-3", None, "g3")
    assert call(uri, None, "subscribe", "mine", None, "g4")["group"] == "g4"
