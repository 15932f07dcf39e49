"""The real processes the hostile suite attacks, and the callers it attacks them as.

A :class:`Stack` is a broker with its embedded name server, a ``probe`` channel and the
push subscriber of that channel (what a normal client's round checks). The shared
:class:`Service` adds the fuzzed parts: a standalone name server, a users file with a user
of limited rights, and a push subscriber whose callback daemon is fuzzed too. Every process
shares one state dir, so this test process holds the owner's token for all of them.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from channel_server import users as user_store
from channel_server.credentials import Credential, ambient
from channel_server.guard import callback_credential
from channel_server.store.sqlite import DB_FILE
from channel_server.users import Action, Grant, UsersFile
from channel_server.wire import channel_ns_name, locate_ns, make_proxy
from tests.hostile.caller import Who
from tests.hostile.normal import Probe
from tests.hostile.rawwire import address_of
from tests.integration.procs import Cluster, Proc, free_port, wait_until

PROBE_CHANNEL = "probe"
FUZZ_CHANNELS = ("fuzz", "fuzz.topic")
"""Fuzzed channels (``fuzz.topic`` is made a topic)."""
CALLBACK_CHANNEL = "hooks"
"""The channel of the subscriber whose callback is fuzzed; the broker fuzz leaves it
alone, so what reaches that subscriber afterwards says how its callback fared."""
CALLBACK_SUBSCRIBER = "hook"
LIMITED_USER = Credential("eve", "eve-password-1")
LIMITED_GRANT = Grant("fuzz*", frozenset({Action.PUBLISH, Action.SUBSCRIBE}))
STRANGERS = (
    Who("anonymous", None, False),
    Who("wrong-token", Credential("owner", "not-the-token-" * 3), False),
)


def owner() -> Who:
    """The local token's user: everything is allowed to it (this process's ambient one)."""
    return Who("owner", ambient(), True)


def limited() -> Who:
    return Who("eve", LIMITED_USER, True)


def write_users(path: Path) -> Path:
    """A users file with eve (publish and subscribe on fuzz* only), hashed cheaply."""
    user_store.set_test_parameters(cheap=True)
    try:
        users = UsersFile()
        users.add(LIMITED_USER.user, LIMITED_USER.secret, (LIMITED_GRANT,))
        users.save(path)
    finally:
        user_store.set_test_parameters(cheap=False)
    return path


@dataclass
class Stack:
    cluster: Cluster
    broker: Proc
    probe: Probe
    broker_uri: str
    """The broker's own object (``pubsub.broker.<id>``), from its ready line."""

    @property
    def broker_address(self) -> tuple[str, int]:
        return address_of(self.broker_uri)

    def channel_uri(self, channel: str) -> str:
        with locate_ns("127.0.0.1", self.ns_port) as ns:
            return str(ns.lookup(channel_ns_name(channel)))

    @property
    def ns_port(self) -> int:
        return self.cluster.ns_port


@contextlib.contextmanager
def running_stack(
    root: Path, name: str, *flags: str, channels: tuple[str, ...] = ()
) -> Iterator[Stack]:
    """A broker named ``name`` (its own name server port, started with ``flags``) hosting
    ``probe`` and ``channels``, and the probe's push subscriber; all stopped after."""
    cluster = Cluster(root)
    try:
        broker = cluster.broker(PROBE_CHANNEL, *channels, extra=flags, name=name)
        uri = broker.wait_for(r"ready at (PYRO:\S+?);").group(1)
        sub_id = f"{name}-push"
        cluster.subscriber(PROBE_CHANNEL, sub_id)
        probe = Probe(cluster.ns_port, PROBE_CHANNEL, _record(cluster, sub_id))
        yield Stack(cluster, broker, probe, uri)
    finally:
        cluster.close()


def _record(cluster: Cluster, sub_id: str) -> Path:
    return cluster.record_path(PROBE_CHANNEL, sub_id)


@dataclass
class Service:
    """The shared, fuzzed deployment."""

    stack: Stack
    nameserver: Proc
    ns_port: int
    """The standalone name server's port."""
    subscriber: Proc
    """A push subscriber on CALLBACK_CHANNEL, whose callback daemon is fuzzed."""
    callback_uri: str
    callback_who: Who
    dead_port: int


@contextlib.contextmanager
def running_service(root: Path) -> Iterator[Service]:
    users = write_users(root / "users.yaml")
    channels = (FUZZ_CHANNELS[0], CALLBACK_CHANNEL)
    with running_stack(root, "broker", "--users", str(users), channels=channels) as stack:
        cluster = stack.cluster
        with make_proxy(stack.broker_uri, 10.0) as broker:
            broker.create_channel(FUZZ_CHANNELS[1], "topic")
        ns_port = free_port()
        nameserver = cluster.start(
            "nameserver",
            [
                "-m",
                "channel_server",
                "nameserver",
                "--ns-port",
                str(ns_port),
                "--users",
                str(users),
            ],
            r"name server ready at",
        )
        sub = cluster.subscriber(CALLBACK_CHANNEL, CALLBACK_SUBSCRIBER)
        callback = sub.wait_for(r"at (PYRO:\S+)").group(1)
        secret = _callback_secret(cluster.data_dir("broker") / DB_FILE, CALLBACK_SUBSCRIBER)
        who = Who("broker", callback_credential(secret), True)
        yield Service(stack, nameserver, ns_port, sub, callback, who, free_port())


def _callback_secret(db: Path, member_id: str) -> str:
    """The secret a push subscriber gave the broker (the broker keeps it in its store):
    what lets a caller in to the subscriber's callback daemon as the broker."""

    def read() -> str | None:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            row = conn.execute(
                "SELECT secret FROM members WHERE member_id = ?", (member_id,)
            ).fetchone()
        return row[0] if row else None

    return wait_until(read, what=f"{member_id}'s callback secret in the broker's store")
