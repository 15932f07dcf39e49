"""The broker's channel table in-process: a real Broker (daemon and embedded name server
on port 0, memory store). Creating a channel calls the name server outside the broker
lock; two requests for one name make one channel; a failed creation leaves nothing behind.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from channel_server import broker as broker_module
from channel_server.access import Access
from channel_server.broker import Broker
from channel_server.config import BrokerConfig
from channel_server.errors import BrokerUnavailable, LimitReached, UnknownChannel
from channel_server.hosted import HostedChannels
from channel_server.nameservice import NameService
from channel_server.store import MemoryStore
from channel_server.wire import channel_ns_name

TOKEN = "a-local-token-of-the-test"
WAIT_S = 10.0


class GatedNameService:
    """The broker's name service, whose ``register`` of one name waits for the test."""

    def __init__(self, inner: NameService, gated: str) -> None:
        self._inner = inner
        self._gated = channel_ns_name(gated)
        self.entered = threading.Event()
        self.go = threading.Event()
        self.fail_next = False

    def register(self, name: str, uri: str, safe: bool, metadata: set[str]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("the name server went away")
        if name == self._gated:
            self.entered.set()
            assert self.go.wait(WAIT_S), "the test never let the registration go"
        self._inner.register(name, uri, safe, metadata)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


@pytest.fixture
def broker() -> Iterator[Broker]:
    config = BrokerConfig(port=0, ns_port=0, max_channels=3, housekeeping_s=60.0)
    b = Broker(config, MemoryStore(), TOKEN, Access(TOKEN))
    b.start()
    yield b
    b.stop()


def gate(broker: Broker, name: str) -> GatedNameService:
    gated = GatedNameService(broker.ns, name)
    broker.ns = gated
    return gated


def in_thread(call: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``call(*args)``; the list gets its result or the exception it raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call(*args))
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_the_table_is_served_while_a_creation_waits_for_the_name_server(broker: Broker) -> None:
    gated = gate(broker, "slow")
    slow, result = in_thread(broker.create_channel, "slow")
    assert gated.entered.wait(WAIT_S)
    # Given a creation stuck in its name-server call, the broker lock is free:
    assert broker.channel_names() == []
    assert broker.create_channel("fast").startswith("PYRO:channel.fast@")
    with pytest.raises(UnknownChannel):
        broker.channel("slow")
    gated.go.set()
    slow.join(WAIT_S)
    assert result[0].startswith("PYRO:channel.slow@")
    assert broker.channel_names() == ["fast", "slow"]


def test_two_creations_of_one_name_make_one_channel(broker: Broker) -> None:
    gated = gate(broker, "twin")
    first, first_uri = in_thread(broker.create_channel, "twin")
    assert gated.entered.wait(WAIT_S)
    second, second_uri = in_thread(broker.create_channel, "twin")
    second.join(0.2)
    assert second.is_alive(), "the second request waits for the first"
    gated.go.set()
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert first_uri == second_uri and first_uri[0].startswith("PYRO:channel.twin@")
    assert broker.ns.lookup(channel_ns_name("twin"))[0] == first_uri[0]
    assert broker.channel_names() == ["twin"]


def test_a_creation_that_takes_too_long_is_refused_to_the_one_waiting(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker_module, "CREATE_WAIT_S", 0.1)
    gated = gate(broker, "stuck")
    first, _ = in_thread(broker.create_channel, "stuck")
    assert gated.entered.wait(WAIT_S)
    with pytest.raises(BrokerUnavailable, match="still being created"):
        broker.create_channel("stuck")
    gated.go.set()
    first.join(WAIT_S)


def test_a_failed_creation_leaves_the_name_free(broker: Broker) -> None:
    gated = gate(broker, "unused")
    gated.fail_next = True
    with pytest.raises(ConnectionError):
        broker.create_channel("flaky")
    assert broker.channel_names() == []
    assert broker.create_channel("flaky").startswith("PYRO:channel.flaky@")


def test_names_being_created_count_against_the_cap() -> None:
    table = HostedChannels(max_channels=1, broker_id="b1")
    assert table.reserve("a") is None
    with pytest.raises(LimitReached):
        table.reserve("b")
    assert table.reserve("b", restoring=True) is None  # the store's channels come back
    table.release("b")
    waiting = table.reserve("a")
    assert isinstance(waiting, threading.Event) and not waiting.is_set()
    table.release("a")
    assert waiting.is_set()
    assert table.reserve("a") is None  # nothing was hosted: the next caller creates it


def test_nothing_is_hosted_once_the_table_is_closed() -> None:
    table = HostedChannels(max_channels=5, broker_id="b1")
    assert table.reserve("late") is None
    assert table.close() == []
    with pytest.raises(BrokerUnavailable, match="stopping"):
        table.add("late", object())  # type: ignore[arg-type]
