"""Name server access for a process that serves: an existing one, or an embedded one.

Any thread may call this object: with an embedded name server it calls the in-process
NameServer (which has its own lock); with a remote one it opens a proxy per call, because a
Pyro5 proxy belongs to the thread that made it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import Pyro5.errors
import Pyro5.nameserver

from channel_server.errors import BrokerUnavailable
from channel_server.wire import locate_ns

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 5.0


class NameService:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.embedded = False
        self._ns_daemon: Any = None
        self._thread: threading.Thread | None = None

    @classmethod
    def connect_or_start(cls, host: str, port: int) -> NameService:
        """Use the name server at host:port, or start one there when none answers."""
        service = cls(host, port)
        try:
            locate_ns(host, port)._pyroRelease()
            log.info("using the name server at %s:%d", host, port)
        except BrokerUnavailable:
            service._start_embedded()
        return service

    def _start_embedded(self) -> None:
        uri, daemon, _ = Pyro5.nameserver.start_ns(self.host, self.port, enableBroadcast=False)
        self._ns_daemon = daemon
        self.port = uri.port
        self.embedded = True
        self._thread = threading.Thread(target=daemon.requestLoop, name="nameserver", daemon=True)
        self._thread.start()
        log.info("started an embedded name server at %s:%d", self.host, self.port)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.embedded:
            return getattr(self._ns_daemon.nameserver, method)(*args, **kwargs)
        with locate_ns(self.host, self.port) as ns:
            return getattr(ns, method)(*args, **kwargs)

    def register(self, name: str, uri: str, safe: bool, metadata: set[str]) -> None:
        """Raises Pyro5.errors.NamingError when ``safe`` and the name is taken."""
        self._call("register", name, str(uri), safe=safe, metadata=metadata)

    def lookup(self, name: str) -> tuple[str, set[str]] | None:
        try:
            uri, meta = self._call("lookup", name, return_metadata=True)
        except Pyro5.errors.NamingError:
            return None
        return str(uri), set(meta)

    def list(self, prefix: str) -> dict[str, tuple[str, set[str]]]:
        entries = self._call("list", prefix=prefix, return_metadata=True)
        return {name: (str(uri), set(meta)) for name, (uri, meta) in entries.items()}

    def remove(self, name: str) -> None:
        try:
            self._call("remove", name)
        except (Pyro5.errors.PyroError, BrokerUnavailable) as exc:
            log.warning("could not remove %s from the name server: %s", name, exc)

    def close(self) -> None:
        if self._ns_daemon is not None:
            self._ns_daemon.shutdown()
            if self._thread is not None:
                self._thread.join(STOP_TIMEOUT_S)
            self._ns_daemon.close()
            self._ns_daemon = None
