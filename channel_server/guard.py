"""Daemons that admit a connection only through a gate (Pyro5's handshake hook).

The broker's and the name server's gate is their :class:`~channel_server.access.Access`;
a subscriber's callback daemon admits only the broker it subscribed with, which proves
itself with the secret the subscriber gave it (:func:`secret_gate`).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any

import Pyro5.server

from channel_server import tls
from channel_server.credentials import Credential
from channel_server.errors import NotAuthorized
from channel_server.transport import HardenedDaemon

log = logging.getLogger(__name__)
Gate = Callable[[Any, Any], Any]
CALLBACK_USER = "broker"
"""The user name a broker gives when it connects to a subscriber's callback."""


class GuardedDaemon(HardenedDaemon, Pyro5.server.Daemon):
    def __init__(self, gate: Gate, **kwargs: Any) -> None:
        tls.from_environment(serving=True)
        super().__init__(**kwargs)
        self._gate = gate

    def validateHandshake(self, conn: Any, data: Any) -> Any:
        return self._gate(conn, data)


def secret_gate(secret: str, what: str) -> Gate:
    """A gate that admits callers presenting ``secret`` (``callback_credential``)."""

    def admit(conn: Any, data: Any) -> str:
        given = data.get("secret") if isinstance(data, dict) else None
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), secret.encode()):
            log.warning("%s: refused a connection from %s", what, peer_of(conn))
            raise NotAuthorized(f"{what} admits only the broker it subscribed with")
        return "welcome"

    return admit


def callback_credential(secret: str) -> Credential:
    """What the broker presents to a subscriber's callback daemon."""
    return Credential(CALLBACK_USER, secret)


def peer_of(conn: Any) -> str:
    """host:port of a connection's peer, for logs."""
    try:
        host, port = conn.sock.getpeername()[:2]
    except Exception:
        return "?"
    return f"{host}:{port}"
