"""DaemonLoop: one thread serves a real Pyro5 daemon; stop ends it and closes the socket; a
loop that ends without a stop is reported, so the process stops and exits with an error
(its supervisor restarts it) instead of living on deaf."""

from __future__ import annotations

import threading

import Pyro5.api
import Pyro5.socketutil
import pytest

from channel_client.runtime import serve_until_stopped
from channel_server import transport
from channel_server.daemon_loop import DaemonLoop


def test_stop_ends_the_loop_thread_and_closes_the_daemon() -> None:
    daemon = Pyro5.api.Daemon(host="127.0.0.1", port=0)
    serving = DaemonLoop(daemon, "test-loop")
    serving.start()
    assert any(t.name == "test-loop" for t in threading.enumerate())
    assert serving.stop(timeout_s=5.0) is True
    assert not any(t.name == "test-loop" for t in threading.enumerate())
    assert daemon.transportServer is None  # Daemon.close let go of its sockets


def test_a_loop_never_started_still_closes_its_daemon() -> None:
    daemon = Pyro5.api.Daemon(host="127.0.0.1", port=0)
    assert DaemonLoop(daemon, "never-started").stop(timeout_s=1.0) is True
    assert daemon.transportServer is None  # Daemon.close let go of its sockets


class Hardened(transport.HardenedDaemon, Pyro5.api.Daemon):
    """A daemon on the lobby transport, as every daemon of the service is."""


APPLIED = (
    "POLLTIMEOUT",
    "COMMTIMEOUT",
    "MAX_MESSAGE_SIZE",
    "THREADPOOL_SIZE",
    "THREADPOOL_SIZE_MIN",
)
"""The settings of Pyro5's config that ``TransportConfig.apply`` sets."""


def test_daemons_poll_rarely_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle daemon's accept loop and housekeeper wake only every IDLE_POLL_S (an idle
    subscriber then costs no CPU): a connection, a deadline or a stop wakes them."""
    for name in APPLIED:
        monkeypatch.setattr(Pyro5.config, name, getattr(Pyro5.config, name))  # restored after
    monkeypatch.setattr(transport, "_config", transport._config)
    transport.TransportConfig().apply()
    assert Pyro5.config.POLLTIMEOUT == transport.IDLE_POLL_S >= 10.0


def test_a_stop_does_not_need_a_connection_to_the_daemon_to_end_its_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pyro5 wakes its loop by connecting to the daemon's port, then closes the listening
    socket 50 ms later. A connection that does not get through (a full backlog), or a loop
    thread that had not run by then, left the loop selecting until its poll ended (an hour
    here)."""
    monkeypatch.setattr(Pyro5.config, "POLLTIMEOUT", 3600.0)
    monkeypatch.setattr(Pyro5.socketutil, "interrupt_socket", lambda address: None)
    daemon = Hardened(host="127.0.0.1", port=0)
    serving = DaemonLoop(daemon, "test-loop")
    serving.start()
    assert serving.stop(timeout_s=30.0) is True


DEADLINE_S = 10.0


class Daemon:
    """Serves until shut down, or fails when told to (what a Pyro5 daemon's loop does on an
    error it does not catch)."""

    def __init__(self) -> None:
        self.fail = threading.Event()
        self.down = threading.Event()

    def requestLoop(self) -> None:
        while not self.down.wait(0.01):
            if self.fail.is_set():
                raise RuntimeError("can't start new thread")

    def shutdown(self) -> None:
        self.down.set()

    def close(self) -> None:
        pass


def test_a_loop_that_fails_is_reported_and_ends_the_wait_for_a_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    daemon = Daemon()
    loop = DaemonLoop(daemon, "test-daemon")
    assert loop.failed() is None  # not started yet
    loop.start()
    assert loop.failed() is None
    daemon.fail.set()
    reason = serve_until_stopped(threading.Event(), loop.failed)  # returns, not waits on
    assert reason == "test-daemon: the request loop ended; no connection is accepted"
    assert "can't start new thread" in caplog.text
    loop.stop(DEADLINE_S)
    assert loop.failed() is None


def test_a_loop_stopped_on_purpose_is_no_failure() -> None:
    loop = DaemonLoop(Daemon(), "test-daemon")
    loop.start()
    assert loop.stop(DEADLINE_S)
    assert loop.failed() is None
