"""RemoteChannel.call retries what a restart of a broker or of its database ends: a
StoreError (a PostgreSQL restart made `publish --retry-for 90` exit at once, session 32)
is tried again, and raised as itself when it lasts; the service's other errors at once."""

from __future__ import annotations

from typing import Any

import pytest

from channel_client import remote
from channel_client.remote import ClientOptions, RemoteChannel
from channel_server.errors import InvalidEvent, StoreError


class FlakyProxy:
    """Fails its first ``failures`` publishes with ``error``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def publish(self, events: list[Any]) -> dict[str, int]:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return {"accepted": len(events)}

    def _pyroClaimOwnership(self) -> None:
        pass

    def _pyroRelease(self) -> None:
        pass


def channel(monkeypatch: pytest.MonkeyPatch, proxy: FlakyProxy, attempts: int) -> RemoteChannel:
    monkeypatch.setattr(remote, "resolve_channel", lambda *a, **kw: "PYRO:channel.c@h:1")
    monkeypatch.setattr(remote, "make_proxy", lambda uri, timeout: proxy)
    monkeypatch.setattr(remote, "closed_by_peer", lambda p: False)
    return RemoteChannel(ClientOptions("127.0.0.1", 1, attempts=attempts), "c", pause_s=0.0)


DOWN = StoreError("postgresql://db", "server closed the connection unexpectedly")


def test_a_store_error_is_tried_again_until_the_store_is_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = FlakyProxy(2, DOWN)
    assert channel(monkeypatch, proxy, attempts=5).call("publish", ["e"]) == {"accepted": 1}
    assert proxy.calls == 3


def test_a_store_error_that_lasts_is_raised_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = FlakyProxy(10, DOWN)
    with pytest.raises(StoreError, match="server closed the connection"):
        channel(monkeypatch, proxy, attempts=3).call("publish", ["e"])
    assert proxy.calls == 3


def test_the_services_other_errors_are_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = FlakyProxy(10, InvalidEvent("id", "empty"))
    with pytest.raises(InvalidEvent):
        channel(monkeypatch, proxy, attempts=3).call("publish", ["e"])
    assert proxy.calls == 1
