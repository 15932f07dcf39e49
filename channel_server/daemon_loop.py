"""A Pyro5 daemon and the thread that runs its request loop, started and stopped as one.

The broker, the name server (embedded or on its own) and a push subscriber's callback all
serve a daemon from one background thread. Stopping is always the same three steps in
this order: ask the loop to end, wait for its thread (bounded), then close the daemon's
sockets; closing first would pull the sockets from under a loop still selecting on them.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

log = logging.getLogger(__name__)


class ServedDaemon(Protocol):
    """What of a Pyro5 daemon the loop needs."""

    def requestLoop(self) -> None: ...

    def shutdown(self) -> None: ...

    def close(self) -> None: ...


class DaemonLoop:
    """Owns the thread that serves ``daemon`` (``start``) and ends both (``stop``)."""

    def __init__(self, daemon: ServedDaemon, name: str) -> None:
        self.daemon = daemon
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._stopping = False

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        try:
            self.daemon.requestLoop()
        except BaseException:
            log.critical("%s: the request loop failed", self._thread.name, exc_info=True)
            return
        if not self._stopping:
            log.critical("%s: the request loop ended: no connection is accepted", self._thread.name)

    def failed(self) -> str | None:
        """Why the daemon no longer serves though nobody stopped it (None while it does):
        the process should stop, for its supervisor to start it again, rather than live
        on deaf to every caller."""
        if self._stopping or self._thread.is_alive() or self._thread.ident is None:
            return None
        return f"{self._thread.name}: the request loop ended; no connection is accepted"

    def stop(self, timeout_s: float) -> bool:
        """End the loop, wait at most ``timeout_s`` for its thread, close the daemon.
        Returns whether the thread ended in time."""
        self._stopping = True
        self.daemon.shutdown()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self.daemon.close()
        return not self._thread.is_alive()
