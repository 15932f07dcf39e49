"""A channel's entry in the name server, ``pubsub.channel.<name>``: who claims it, who
gives it up.

The entry is tagged with the broker that hosts the channel, its kind and its id scope, so
clients learn all three in one lookup and a broker recognises its own entry from an
earlier life. Without leases two brokers may race for one name: the claim is a ``safe``
registration and the loser learns the winner's URI. With leases (brokers sharing one
database) the lease already decided, so the claim overwrites an earlier owner's entry.
"""

from __future__ import annotations

from collections.abc import Callable

import Pyro5.errors

from channel_server.core.records import ChannelKind
from channel_server.errors import BrokerUnavailable
from channel_server.events import IdScope
from channel_server.names import (
    BROKER_TAG_PREFIX,
    IDS_TAG_PREFIX,
    KIND_TAG_PREFIX,
    channel_ns_name,
)
from channel_server.nameservice import NameService


class ChannelClaims:
    """The name-server entries of the channels one broker hosts."""

    def __init__(self, names: Callable[[], NameService], broker_id: str, leased: bool) -> None:
        """``names``: the broker's name server (connected when the broker starts);
        ``leased``: whether a lease, not the name server, decides who hosts a channel."""
        self._names = names
        self._ours = BROKER_TAG_PREFIX + broker_id
        self._leased = leased

    def tags(self, kind: ChannelKind, id_scope: IdScope) -> frozenset[str]:
        """A channel's tags in the name server: this broker, its kind and id scope."""
        return frozenset(
            {self._ours, KIND_TAG_PREFIX + kind.value, IDS_TAG_PREFIX + id_scope.value}
        )

    def claim(self, name: str, uri: str, kind: ChannelKind, id_scope: IdScope) -> str:
        """Register ``uri`` for the channel; returns the URI that holds the name now (the
        other broker's, when it won the race)."""
        tags = set(self.tags(kind, id_scope))
        ns_name, ns = channel_ns_name(name), self._names()
        if self._leased:  # the lease is ours: an entry of an earlier owner goes
            ns.register(ns_name, uri, False, tags)
            return uri
        try:
            ns.register(ns_name, uri, True, tags)
            return uri
        except Pyro5.errors.NamingError:
            existing = ns.lookup(ns_name)
        if existing is None or self._ours in existing[1]:
            ns.register(ns_name, uri, False, tags)  # our own entry from an earlier life
            return uri
        return existing[0]

    def elsewhere(self, name: str) -> str:
        """The URI of a channel another broker of the database holds the lease of."""
        entry = self._names().lookup(channel_ns_name(name))
        if entry is None:
            raise BrokerUnavailable(f"channel {name}", "held by another broker; try again")
        return entry[0]

    def give_up(self, name: str) -> None:
        """Remove the channel's entry (this broker claimed it)."""
        self._names().remove(channel_ns_name(name))

    def give_up_if_ours(self, name: str) -> None:
        """Remove the channel's entry while it still names this broker (a lost lease: the
        new owner may have claimed it already)."""
        ns = self._names()
        entry = ns.lookup(channel_ns_name(name))
        if entry is not None and self._ours in entry[1]:
            ns.remove(channel_ns_name(name))
