"""One client object per topic, made on first use (the classic put and get clients both
keep one per topic they touch), the most recently used few kept open."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_OPEN = 8
"""Topic clients kept open: each holds a connection (and a worker thread) of its broker,
so one per topic ever touched used up a user's share of connections, or every one of the
broker's for the owner (session 34's soak: a long-lived PullClient over 30 topics held 60
connections). One used again after it was closed connects again."""


class PerTopic(Generic[T]):
    """``make(topic, drop_replies, create)`` builds a topic's client; the fault option
    ``drop_replies`` (replies to drop, for tests) goes to the first client made only.
    ``close`` ends a client: the least recently used past ``max_open``, one ``drop``
    names, and every one left at ``close``."""

    def __init__(
        self,
        make: Callable[[str, int, bool], T],
        close: Callable[[T], None],
        drop_replies: int = 0,
        max_open: int = MAX_OPEN,
    ) -> None:
        self._make = make
        self._close = close
        self._drops_left = drop_replies
        self._max_open = max_open
        self._clients: dict[str, T] = {}
        """In order of use, the most recent last."""

    def get(self, topic: str, create: bool = False) -> T:
        client = self._clients.pop(topic, None)
        if client is None:
            client = self._make(topic, self._drops_left, create)
            self._drops_left = 0
        self._clients[topic] = client
        while len(self._clients) > self._max_open:
            self._close(self._clients.pop(next(iter(self._clients))))
        return client

    def drop(self, topic: str) -> None:
        """Close a topic's client, if open (its subscription ended, say)."""
        client = self._clients.pop(topic, None)
        if client is not None:
            self._close(client)

    def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            self._close(client)
