"""The four daemons of the shared service the fuzz attacks, each as a :class:`Target`
with its process and the normal client's round that shows it still serves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from channel_server.wire import NS_OBJECT, broker_ns_name
from tests.hostile.caller import Who
from tests.hostile.normal import Probe, name_server_round
from tests.hostile.rawwire import DAEMON_OBJECT, address_of
from tests.hostile.services import (
    CALLBACK_CHANNEL,
    CALLBACK_SUBSCRIBER,
    FUZZ_CHANNELS,
    STRANGERS,
    Service,
    limited,
    owner,
)
from tests.hostile.targets import Target, read_endpoints
from tests.integration.procs import Proc

NS_WRITES = frozenset({"register", "remove", "set_metadata"})
"""Not fuzzed as the owner on the broker's own name server: a random ``remove(prefix="")``
by its rightful owner would unpublish the channels the later checks look up. The owner
fuzzes them on the standalone name server, every other caller on both."""
NAMES = (*FUZZ_CHANNELS, "default", "f1", "f2", "b1", "pubsub.channel.fuzz", "pubsub.")
"""Names the broker and name servers know, for near-valid arguments."""
DAEMONS = ("broker", "embedded-ns", "standalone-ns", "callback")
BROKER_WIPES = frozenset({"delete_channel"})
"""The broker's calls the owner may make that would delete the fuzzed channels."""


@dataclass(frozen=True)
class Daemon:
    target: Target
    proc: Proc
    client_round: Callable[[], float]


def daemon(service: Service, which: str) -> Daemon:
    """One of DAEMONS, with its exposed methods read from it."""
    stack, ns_objects = service.stack, [NS_OBJECT, DAEMON_OBJECT]
    if which == "broker":
        objects = [f"channel.{c}" for c in FUZZ_CHANNELS] + [broker_ns_name("b1"), DAEMON_OBJECT]
        target = _target(which, stack.broker_address, objects, service, BROKER_WIPES)
        return Daemon(target, stack.broker, stack.probe.round)
    if which == "embedded-ns":
        address = ("127.0.0.1", stack.ns_port)
        target = _target(which, address, ns_objects, service, NS_WRITES)
        return Daemon(target, stack.broker, stack.probe.round)
    if which == "standalone-ns":
        address = ("127.0.0.1", service.ns_port)
        target = _target(which, address, ns_objects, service)
        return Daemon(target, service.nameserver, lambda: name_server_round(service.ns_port))
    return _callback(service)


def _target(
    name: str,
    address: tuple[str, int],
    objects: list[str],
    service: Service,
    owner_skips: frozenset[str] = frozenset(),
) -> Target:
    endpoints = read_endpoints(address, owner(), objects, owner_skips)
    identities = (owner(), limited(), *STRANGERS)
    return Target(name, address, endpoints, identities, NAMES, service.dead_port)


def _callback(service: Service) -> Daemon:
    """The subscriber's callback daemon: the broker (with the secret) gets in; the owner's
    token is a stranger's credential there."""
    address = address_of(service.callback_uri)
    object_id = service.callback_uri.split(":")[1].split("@")[0]
    endpoints = read_endpoints(address, service.callback_who, [object_id, DAEMON_OBJECT])
    identities = (service.callback_who, *STRANGERS, Who("owner-token", owner().credential, False))
    names = (CALLBACK_SUBSCRIBER, CALLBACK_CHANNEL, "default")
    proc = service.subscriber
    target = Target("callback", address, endpoints, identities, names, service.dead_port)
    record = service.stack.cluster.record_path(CALLBACK_CHANNEL, CALLBACK_SUBSCRIBER)
    return Daemon(target, proc, Probe(service.stack.ns_port, CALLBACK_CHANNEL, record).round)
