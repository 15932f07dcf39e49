"""A Pyro5 daemon and the thread that runs its request loop, started and stopped as one.

The broker, the name server (embedded or on its own) and a push subscriber's callback all
serve a daemon from one background thread. Stopping is always the same three steps in
this order: ask the loop to end, wait for its thread (bounded), then close the daemon's
sockets; closing first would pull the sockets from under a loop still selecting on them.
"""

from __future__ import annotations

import threading
from typing import Protocol


class ServedDaemon(Protocol):
    """What of a Pyro5 daemon the loop needs."""

    def requestLoop(self) -> None: ...

    def shutdown(self) -> None: ...

    def close(self) -> None: ...


class DaemonLoop:
    """Owns the thread that serves ``daemon`` (``start``) and ends both (``stop``)."""

    def __init__(self, daemon: ServedDaemon, name: str) -> None:
        self.daemon = daemon
        self._thread = threading.Thread(target=daemon.requestLoop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> bool:
        """End the loop, wait at most ``timeout_s`` for its thread, close the daemon.
        Returns whether the thread ended in time."""
        self.daemon.shutdown()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self.daemon.close()
        return not self._thread.is_alive()
