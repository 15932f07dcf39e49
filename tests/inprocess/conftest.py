"""In-process edges: a real EventChannel over the memory store and a real dispatch pool,
driven with a fake clock (pull, housekeeping) or a real Pyro5 daemon on port 0 (push)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import Pyro5.server
import pytest

from channel_server.channel import EventChannel
from channel_server.config import ChannelConfig
from channel_server.core.records import ChannelKind
from channel_server.dispatch import DispatchPool
from channel_server.guard import secret_gate
from channel_server.proofs import PROOF_TARGET
from channel_server.store import MemoryStore, Store
from channel_server.transport import proof_target


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pool() -> Iterator[DispatchPool]:
    p = DispatchPool(2, name="test-dispatch")
    p.start()
    yield p
    p.stop()


CALLBACK_SECRET = "a-callback-secret-of-the-test"
"""What fake subscribers give the channel, and their daemon checks the broker knows."""


class FakeSubscribersDaemon(Pyro5.server.Daemon):
    """A Pyro5 daemon for fake subscribers' callback objects that, like a subscriber's,
    admits only a broker proving it knows CALLBACK_SECRET (and proves it knows it too)."""

    def __init__(self) -> None:
        self._since = time.monotonic()
        super().__init__(host="127.0.0.1", port=0)
        self._gate = secret_gate(CALLBACK_SECRET, "fake subscribers")

    def validateHandshake(self, conn: Any, data: Any) -> Any:
        setattr(conn, PROOF_TARGET, proof_target(conn.sock, self._since))  # as a real one
        return self._gate(conn, data)


@pytest.fixture
def daemon() -> Iterator[Pyro5.server.Daemon]:
    """A real Pyro5 daemon on port 0 for fake subscribers' callback objects."""
    d = FakeSubscribersDaemon()
    loop = threading.Thread(target=d.requestLoop, daemon=True)
    loop.start()
    yield d
    d.shutdown()
    loop.join(5)
    d.close()


ChannelFactory = Callable[..., EventChannel]


@pytest.fixture
def make_channel(pool: DispatchPool) -> Iterator[ChannelFactory]:
    made: list[EventChannel] = []

    def make(
        name: str = "c",
        kind: ChannelKind = ChannelKind.QUEUE,
        clock: Callable[[], float] | None = None,
        store: Store | None = None,
        cpu_clock: Callable[[], float] | None = None,
        machine_clock: Callable[[], tuple[float, float] | None] | None = None,
        **overrides: Any,
    ) -> EventChannel:
        config = dataclasses.replace(ChannelConfig(), **overrides)
        extra: dict[str, Any] = {} if clock is None else {"clock": clock}
        if cpu_clock is not None:
            extra["cpu_clock"] = cpu_clock
        if machine_clock is not None:
            extra["machine_clock"] = machine_clock
        channel = EventChannel(name, config, store or MemoryStore(), pool, kind=kind, **extra)
        made.append(channel)
        return channel

    yield make
    for channel in made:
        channel.close()


def event(event_id: str, partition: int | str = 0, ts: float = 1.0) -> dict[str, Any]:
    return {"id": event_id, "publisher_id": "pub", "partition": partition, "timestamp": ts}
