"""Daemons that admit a connection only through a gate (Pyro5's handshake hook).

The broker's and the name server's gate is their :class:`~channel_server.access.Access`;
a subscriber's callback daemon admits only the broker it subscribed with (:func:`secret_gate`).

The callback secret never crosses the wire: each side proves it knows it
(:mod:`~channel_server.proofs`), so a process that took a dead subscriber's port learns
nothing it can use and is sent no event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import Pyro5.client
import Pyro5.server

from channel_server import proofs, tls
from channel_server.credentials import Credential
from channel_server.errors import NotAuthorized
from channel_server.log_throttle import Throttle
from channel_server.transport import HardenedDaemon
from channel_server.wire import make_proxy

log = logging.getLogger(__name__)
Gate = Callable[[Any, Any], Any]
CALLBACK_USER = "broker"
"""The user name a broker gives when it connects to a subscriber's callback."""


class GuardedDaemon(HardenedDaemon, Pyro5.server.Daemon):
    def __init__(self, gate: Gate, **kwargs: Any) -> None:
        tls.from_environment(serving=True)
        super().__init__(**kwargs)
        self._gate = gate

    def admit(self, conn: Any, data: Any) -> Any:
        return self._gate(conn, data)


SUBSCRIBER_ROLE = "subscriber"
"""The role a callback daemon proves the secret under, in its answer."""


class CallbackCredential(Credential):
    """What the broker presents to a subscriber's callback daemon: a fresh proof that it
    knows the callback secret, never the secret itself."""

    def handshake(self, to: int) -> dict[str, Any]:
        return proofs.handshake(self.secret, CALLBACK_USER, to)

    @property
    def answer_role(self) -> str | None:
        return SUBSCRIBER_ROLE


def callback_credential(secret: str) -> CallbackCredential:
    return CallbackCredential(CALLBACK_USER, secret)


def secret_gate(secret: str, what: str, clock: Callable[[], float] = time.time) -> Gate:
    """A gate that admits a caller proving it knows ``secret`` (CallbackCredential), and
    answers with its own proof."""
    checks = proofs.Proofs(secret, CALLBACK_USER, clock)
    refused = Throttle(log)  # once per 10 s: a stranger's refusals cannot fill the disk

    def admit(conn: Any, data: Any) -> dict[str, str]:
        target = getattr(conn, proofs.PROOF_TARGET)
        nonce = checks.admit(data, target)
        if nonce is None:
            otherwise = f"{what} admits only the broker it subscribed with"
            reason = checks.refusal(data, otherwise, target)
            refused.warning(
                "refused", "%s: refused a connection from %s: %.200s", what, peer_of(conn), reason
            )
            raise NotAuthorized(reason)
        return proofs.answer(secret, SUBSCRIBER_ROLE, nonce)

    return admit


def peer_of(conn: Any) -> str:
    """host:port of a connection's peer, for logs."""
    try:
        host, port = conn.sock.getpeername()[:2]
    except Exception:
        return "?"
    return f"{host}:{port}"


def callback_proxy(uri: Any, timeout_s: float, secret: str) -> Pyro5.client.Proxy:
    """The broker's proxy to a subscriber's callback: it sends nothing to a daemon that
    cannot prove it knows ``secret``."""
    return make_proxy(uri, timeout_s, callback_credential(secret))
