"""Finding a channel by name, and placing a new one on the least-busy broker (DESIGN §9).

Client-side and light: it talks to the name server and to brokers over RPC only.
"""

from __future__ import annotations

import logging

import Pyro5.errors

from channel_server.errors import BrokerUnavailable, ChannelConflict, UnknownChannel
from channel_server.wire import (
    NS_BROKER_PREFIX,
    broker_ns_name,
    broker_tag,
    channel_ns_name,
    id_scope_tag,
    locate_ns,
    make_proxy,
)

log = logging.getLogger(__name__)
BROKER_CALL_TIMEOUT_S = 5.0


def resolve_channel(
    ns_host: str,
    ns_port: int,
    channel: str,
    create: bool = False,
    kind: str = "queue",
    id_scope: str | None = None,
) -> str:
    """The URI of ``channel``; with ``create``, host it on the broker with the fewest
    channels (ties: lowest broker id) when nobody does yet. ``id_scope``: the channel must
    have ids unique per that (``publisher`` or ``channel``), or it raises ChannelConflict;
    a new one is created so (None: the broker's default, any existing one will do)."""
    with locate_ns(ns_host, ns_port) as ns:
        try:
            uri, tags = ns.lookup(channel_ns_name(channel), return_metadata=True)
        except Pyro5.errors.NamingError:
            if not create:
                raise UnknownChannel(channel) from None
        else:
            _check_scope(channel, id_scope_tag(tags), id_scope)
            return str(uri)
        brokers = ns.list(prefix=NS_BROKER_PREFIX)
    broker_uri = pick_broker(brokers)
    with make_proxy(broker_uri, BROKER_CALL_TIMEOUT_S) as broker:
        return broker.create_channel(channel, kind, id_scope)


def _check_scope(channel: str, registered: str | None, asked: str | None) -> None:
    """A channel registered by a broker from before id scopes has no tag: not checked."""
    if asked is not None and registered is not None and registered != asked:
        raise ChannelConflict(channel, "ids", registered, asked)


def pick_broker(brokers: dict[str, str]) -> str:
    """The reachable broker with the fewest channels; ties go to the lowest broker id."""
    counts: list[tuple[int, str, str]] = []
    silent: list[str] = []
    for name, uri in brokers.items():
        broker_id = name[len(NS_BROKER_PREFIX) :]
        try:
            with make_proxy(uri, BROKER_CALL_TIMEOUT_S) as broker:
                counts.append((broker.channel_count(), broker_id, uri))
        except Pyro5.errors.CommunicationError as exc:
            log.warning("broker %s is not answering: %s", name, exc)
            silent.append(f"{broker_id}: {exc}")  # a refusal says why (busy, a limit)
    if not counts:
        said = "; ".join(silent) if silent else "none is registered"
        raise BrokerUnavailable("channel placement", f"no broker answered ({said})")
    return min(counts)[2]


def broker_of_channel(ns_host: str, ns_port: int, channel: str) -> str:
    """The URI of the broker hosting ``channel`` (from the channel's name-server tags)."""
    with locate_ns(ns_host, ns_port) as ns:
        try:
            _, tags = ns.lookup(channel_ns_name(channel), return_metadata=True)
        except Pyro5.errors.NamingError:
            raise UnknownChannel(channel) from None
        broker = broker_tag(tags)
        if broker is None:
            raise BrokerUnavailable(f"channel {channel}", "no broker tag in the name server")
        try:
            return str(ns.lookup(broker_ns_name(broker)))
        except Pyro5.errors.NamingError:
            raise BrokerUnavailable(f"broker {broker}", "not registered") from None
