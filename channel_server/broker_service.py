"""What a broker answers over RPC (:class:`BrokerService`: channel creation, listing, admin
calls) and its daemon, apart from the :class:`~channel_server.broker.Broker` that does the
work: the boundary checks its arguments and permissions, the broker trusts them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import Pyro5.api

from channel_server.boundary import check_flag
from channel_server.core.records import ChannelKind
from channel_server.errors import InvalidArgument
from channel_server.events import IdScope
from channel_server.guard import GuardedDaemon
from channel_server.strict_calls import checked_arity
from channel_server.users import Action
from channel_server.wire import check_name

E = TypeVar("E", ChannelKind, IdScope)

if TYPE_CHECKING:
    from channel_server.broker import Broker


class BrokerDaemon(GuardedDaemon):
    """The broker's daemon: it admits authenticated callers only and tells the broker
    when a client connection closes."""

    def __init__(self, gate: Any, on_disconnect: Callable[[Any], None], **kwargs: Any) -> None:
        super().__init__(gate, **kwargs)
        self._on_disconnect = on_disconnect

    def clientDisconnect(self, conn: Any) -> None:
        self._on_disconnect(conn)


@checked_arity
@Pyro5.api.expose
class BrokerService:
    """What a broker answers over RPC: channel creation, listing, admin calls."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def create_channel(
        self, name: str, kind: str = ChannelKind.QUEUE.value, id_scope: str | None = None
    ) -> str:
        """Host a channel (admin on its name), or the URI of its host if it has one;
        ``id_scope``: see Broker.create_channel (ChannelConflict if it has another)."""
        self._broker.access.require(Action.ADMIN, check_name("channel", name))
        return self._broker.create_channel(name, kind, id_scope)

    def channels(self) -> list[str]:
        """The channels hosted here that the caller has some permission on (as the name
        server's listing and the monitor show them: the others are not the caller's to
        learn of)."""
        user = self._broker.access.current()
        return [name for name in self._broker.channel_names() if user.allows_any(name)]

    def channel_count(self) -> int:
        return len(self._broker.channel_names())

    def delete_channel(self, channel: str, force: bool = False) -> dict[str, int]:
        """Delete a channel hosted here and everything stored for it (admin on its name);
        see Broker.delete_channel."""
        self._broker.access.require(Action.ADMIN, check_name("channel", channel))
        return self._broker.delete_channel(channel, check_flag("force", force))

    def kill_queues(self, channel: str) -> int:
        """Empty a channel's in-memory queues (fault injection); returns events dropped."""
        self._broker.access.require(Action.ADMIN, check_name("channel", channel))
        return self._broker.kill_queues(channel)

    def move_channel(self, channel: str, to: str) -> int:
        """Hand a channel to another broker of the same database (admin on its name)."""
        self._broker.access.require(Action.ADMIN, check_name("channel", channel))
        return self._broker.move_channel(channel, to)

    def info(self) -> dict[str, Any]:
        return {
            "leases": self._broker.leases is not None,
            "broker_id": self._broker.config.broker_id,
            "uri": self._broker.uri,
            "channels": self.channels(),
            "durable": self._broker.store.durable,
            "fault_injection": self._broker.config.allow_fault_injection,
        }


def check_kind(kind: Any) -> ChannelKind:
    return _one_of(ChannelKind, kind, "kind")


def check_id_scope(id_scope: Any) -> IdScope:
    return _one_of(IdScope, id_scope, "id_scope")


def _one_of(choices: type[E], value: Any, argument: str) -> E:
    """A member of an enum of strings, or InvalidArgument naming the choices."""
    try:
        return choices(value)
    except ValueError:
        names = ", ".join(c.value for c in choices)
        raise InvalidArgument(argument, f"must be one of {names}") from None
