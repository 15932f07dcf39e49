from __future__ import annotations

import threading
from typing import Any

import Pyro5.client
import Pyro5.errors
import pytest

from channel_client.lookup import resolve_channel
from channel_server.credentials import Credential
from channel_server.wire import make_proxy
from publisher.client import Publisher
from tests.integration.procs import Cluster

pytestmark = pytest.mark.integration


def publisher_for(cluster: Cluster, channel: str, pub_id: str = "PUB", **kw) -> Publisher:
    """A Publisher of this cluster. One partition unless asked (``partitions=``): these
    scenarios check the order of all of a publisher's events, which one partition keeps."""
    kw.setdefault("partitions", 1)
    return Publisher(channel, pub_id, ns_port=cluster.ns_port, **kw)


def channel_stats(cluster: Cluster, channel: str) -> dict:
    uri = resolve_channel("127.0.0.1", cluster.ns_port, channel)
    with make_proxy(uri, 5.0) as proxy:
        return proxy.stats()


class Worker:
    """A subscriber's handler that remembers what it got."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)


def bind_or_refusal(uri: str, credential: Credential | None = None) -> Pyro5.client.Proxy | str:
    """A connected proxy as ``credential`` (the owner's when None), holding its connection
    and a worker thread of the daemon, or why its connection was refused."""
    proxy = make_proxy(uri, 5.0, credential)
    try:
        proxy._pyroBind()
    except Pyro5.errors.CommunicationError as exc:
        proxy._pyroRelease()
        return str(exc)
    return proxy
