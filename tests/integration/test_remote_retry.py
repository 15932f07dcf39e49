"""RemoteChannel's retry rule for "unknown channel", with a real name server and daemon.

A channel unknown from the first try is a caller's mistake: raised at once. Unknown right
after a lost connection, it is a broker still restoring its channels: retried.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import Pyro5.api
import Pyro5.server
import pytest

from channel_client.remote import ClientOptions, RemoteChannel
from channel_server.access import Access
from channel_server.credentials import OWNER, STATE_DIR_ENV, Credential, ensure_token
from channel_server.errors import BrokerUnavailable, UnknownChannel
from channel_server.nameservice import NameService
from channel_server.wire import channel_ns_name, register_errors
from tests.integration.procs import free_port

HOST = "127.0.0.1"


@Pyro5.api.expose
class DiesWithItsName:
    """A channel whose broker goes away mid-call: the name is removed and the connection
    closed before the reply (as when a broker is killed and starts restoring)."""

    def __init__(self, ns: NameService) -> None:
        self._ns = ns

    def ping(self) -> str:
        self._ns.remove(channel_ns_name("jobs"))
        Pyro5.api.current_context.client.close()
        return "never seen"


@pytest.fixture
def ns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NameService]:
    register_errors()
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))  # this process's clients find the token
    token = ensure_token(tmp_path)
    owner = Credential(OWNER, token)
    service = NameService.connect_or_start(HOST, free_port(), Access(token), owner)
    assert service.embedded
    yield service
    service.close()


def remote(ns: NameService, attempts: int = 3) -> RemoteChannel:
    options = ClientOptions(HOST, ns.port, attempts=attempts, timeout_s=2.0)
    return RemoteChannel(options, "jobs", pause_s=0.01)


def test_a_channel_never_seen_is_unknown_at_once(ns: NameService) -> None:
    channel = remote(ns)
    with pytest.raises(UnknownChannel):
        channel.call("ping")
    assert channel.retries == 0


def test_a_channel_gone_with_its_connection_is_retried(ns: NameService) -> None:
    daemon = Pyro5.server.Daemon(host=HOST, port=free_port())
    uri = daemon.register(DiesWithItsName(ns), objectId="channel.jobs")
    loop = threading.Thread(target=daemon.requestLoop, daemon=True)
    loop.start()
    ns.register(channel_ns_name("jobs"), str(uri), False, set())
    channel = remote(ns)
    try:
        with pytest.raises(BrokerUnavailable):  # retried to the end, not "unknown channel"
            channel.call("ping")
        assert channel.retries == 2
    finally:
        channel.release()
        daemon.shutdown()
        loop.join(5.0)
        daemon.close()


def test_retries_stop_when_their_window_is_over_not_after_every_attempt(
    ns: NameService,
) -> None:
    """A broker whose link holds calls unanswered (a half-open connection): each attempt
    waits out its timeout, and retrying counted attempts, not time (session 36's network
    probe: --retry-for 5 took 135 s). Here a window of 1 s (11 attempts 0.1 s apart, and
    RETRY_SLACK_S) against attempts of 0.5 s each: a few attempts, not 11."""
    silent = socket.create_server((HOST, 0))  # connects, never answers: nothing accepts
    try:
        uri = f"PYRO:channel.jobs@{HOST}:{silent.getsockname()[1]}"
        ns.register(channel_ns_name("jobs"), uri, False, set())
        options = ClientOptions(HOST, ns.port, attempts=11, timeout_s=0.5)
        channel = RemoteChannel(options, "jobs", pause_s=0.1)
        with pytest.raises(BrokerUnavailable, match=r"no answer after [2-6] attempts"):
            channel.call("ping")
        assert 1 <= channel.retries <= 5
    finally:
        silent.close()
