"""One client object per topic, made on first use and closed together (the classic put and
get clients both keep one per topic they touch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerTopic(Generic[T]):
    """``make(topic, drop_replies, create)`` builds a topic's client; the fault option
    ``drop_replies`` (replies to drop, for tests) goes to the first client made only.
    ``close`` is applied to every client made, once."""

    def __init__(
        self,
        make: Callable[[str, int, bool], T],
        close: Callable[[T], None],
        drop_replies: int = 0,
    ) -> None:
        self._make = make
        self._close = close
        self._drops_left = drop_replies
        self._clients: dict[str, T] = {}

    def get(self, topic: str, create: bool = False) -> T:
        client = self._clients.get(topic)
        if client is None:
            client = self._clients[topic] = self._make(topic, self._drops_left, create)
            self._drops_left = 0
        return client

    def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            self._close(client)
