"""The channels a broker hosts, and the names being created now (any thread may call).

Creating a channel takes a name-server round trip and a store read, so the broker does it
outside this table's lock: the name is *reserved* here first, and a second request for the
same name waits for the first to finish instead of creating a twin (or holding a lock over
the name server, as the broker did before).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from channel_server.errors import BrokerUnavailable, LimitReached

if TYPE_CHECKING:
    from channel_server.channel import EventChannel


class HostedChannels:
    """The broker's table of channels: hosted ones, and reservations of names."""

    def __init__(self, max_channels: int, broker_id: str) -> None:
        """``max_channels``: the cap on channels hosted and being created (a restored one
        may pass it)."""
        self._max = max_channels
        self._where = f"broker {broker_id}"
        # The broker lock. Guards: _channels (name -> channel hosted here), _creating
        #   (name -> the Event its creator sets when done) and _closed.
        # Held only to read or change those: never over a name-server call, a daemon
        #   or store call, a wait, or a call into a channel (which takes that channel's
        #   lock). So it comes first in the lock order and is held alone: no other lock
        #   is taken under it, and no thread holding another lock takes it.
        self._lock = threading.Lock()
        self._channels: dict[str, EventChannel] = {}
        self._creating: dict[str, threading.Event] = {}
        self._closed = False

    def get(self, name: str) -> EventChannel | None:
        with self._lock:
            return self._channels.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._channels)

    def all(self) -> list[EventChannel]:
        with self._lock:
            return list(self._channels.values())

    def reserve(self, name: str, restoring: bool = False) -> EventChannel | threading.Event | None:
        """The channel if it is hosted; the Event of a creation of it under way (wait on
        it, then ask again); or None: the name is now reserved for the caller, who must
        :meth:`release` it. A new name past the cap raises LimitReached, unless
        ``restoring`` a channel the store kept."""
        with self._lock:
            if (channel := self._channels.get(name)) is not None:
                return channel
            if (creating := self._creating.get(name)) is not None:
                return creating
            if not restoring and len(self._channels) + len(self._creating) >= self._max:
                raise LimitReached("channels", self._max, self._where)
            self._creating[name] = threading.Event()
            return None

    def add(self, name: str, channel: EventChannel) -> None:
        """Host a channel whose name the caller reserved; BrokerUnavailable once closed."""
        with self._lock:
            if self._closed:
                raise BrokerUnavailable(f"channel {name}", "the broker is stopping")
            self._channels[name] = channel

    def remove(self, name: str) -> EventChannel | None:
        """Stop hosting a channel (its lease was lost); the channel, or None if not hosted."""
        with self._lock:
            return self._channels.pop(name, None)

    def release(self, name: str) -> None:
        """End the caller's reservation (hosted or not) and wake those waiting for it."""
        with self._lock:
            done = self._creating.pop(name)
        done.set()

    def close(self) -> list[EventChannel]:
        """Host nothing more; returns the channels hosted, for the broker to close."""
        with self._lock:
            self._closed = True
            return list(self._channels.values())
