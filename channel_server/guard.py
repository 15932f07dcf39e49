"""Daemons that admit a connection only through a gate (Pyro5's handshake hook).

The broker's and the name server's gate is their :class:`~channel_server.access.Access`;
a subscriber's callback daemon admits only the broker it subscribed with (:func:`secret_gate`).

The callback secret itself never crosses the wire. A subscriber that died leaves its port
for any local process to take, and the broker keeps pushing to that address until the
member is declared dead. So each side proves that it knows the secret:
- the broker sends a fresh nonce, the time, and an HMAC of them
  (:class:`CallbackCredential`);
- the daemon admits a proof made within ``PROOF_WINDOW_S`` whose nonce it has not seen,
  and answers with an HMAC of that nonce;
- the broker pushes only over a connection whose answer checks out (:class:`CallbackProxy`).

A squatter learns nothing it can use, and gets no event.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import Pyro5.client
import Pyro5.errors
import Pyro5.server

from channel_server import tls
from channel_server.credentials import Credential
from channel_server.errors import NotAuthorized
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

    def validateHandshake(self, conn: Any, data: Any) -> Any:
        return self._gate(conn, data)


PROOF_WINDOW_S = 300.0
"""A broker's proof is admitted this long after it was made (clocks of two machines may
differ a little); its nonce is remembered as long, so it cannot be used twice."""
NONCE_CHARS = 32
SUBSCRIBER_ROLE = "subscriber"


def _mac(secret: str, *parts: str) -> str:
    return hmac.new(secret.encode(), "\n".join(parts).encode(), hashlib.sha256).hexdigest()


class CallbackCredential(Credential):
    """What the broker presents to a subscriber's callback daemon: a fresh proof that it
    knows the callback secret, never the secret itself."""

    def handshake(self) -> dict[str, Any]:
        nonce, made_at = secrets.token_hex(NONCE_CHARS // 2), time.time()
        proof = _mac(self.secret, CALLBACK_USER, nonce, repr(made_at))
        return {"user": CALLBACK_USER, "nonce": nonce, "time": made_at, "proof": proof}


def callback_credential(secret: str) -> CallbackCredential:
    return CallbackCredential(CALLBACK_USER, secret)


class CallbackProxy(Pyro5.client.Proxy):
    """A proxy to a subscriber's callback that connects only to a daemon answering its
    handshake with the proof of the same secret (see the module docstring)."""

    def __init__(self, uri: Any, secret: str) -> None:
        super().__init__(uri)
        object.__setattr__(self, "_callback_secret", secret)  # (Proxy refuses other names)

    def _pyroValidateHandshake(self, response: Any) -> None:
        sent = self._pyroHandshake if isinstance(self._pyroHandshake, dict) else {}
        nonce, proof = (
            sent.get("nonce"),
            response.get("proof") if isinstance(response, dict) else None,
        )
        secret: str = object.__getattribute__(self, "_callback_secret")
        expected = _mac(secret, SUBSCRIBER_ROLE, str(nonce))
        if not (nonce and isinstance(proof, str) and hmac.compare_digest(proof, expected)):
            raise Pyro5.errors.CommunicationError(
                "the callback did not prove it is the subscriber (another process may "
                "have its port): nothing is sent there"
            )


def secret_gate(secret: str, what: str, clock: Callable[[], float] = time.time) -> Gate:
    """A gate that admits a caller proving it knows ``secret`` (CallbackCredential), and
    answers with its own proof."""
    seen: dict[str, float] = {}
    lock = threading.Lock()  # guards seen: handshakes run on the daemon's worker threads

    def admit(conn: Any, data: Any) -> dict[str, str]:
        nonce = _admitted_nonce(data, secret, seen, lock, clock())
        if nonce is None:
            log.warning("%s: refused a connection from %s", what, peer_of(conn))
            raise NotAuthorized(f"{what} admits only the broker it subscribed with")
        return {"proof": _mac(secret, SUBSCRIBER_ROLE, nonce)}

    return admit


def _admitted_nonce(
    data: Any, secret: str, seen: dict[str, float], lock: threading.Lock, now: float
) -> str | None:
    """The nonce of a proof made with ``secret`` within the window and not used before
    (then remembered); None otherwise."""
    if not isinstance(data, dict):
        return None
    nonce, made_at, proof = data.get("nonce"), data.get("time"), data.get("proof")
    if not (isinstance(nonce, str) and len(nonce) == NONCE_CHARS and isinstance(proof, str)):
        return None
    if type(made_at) is not float or abs(now - made_at) > PROOF_WINDOW_S:
        return None
    expected = _mac(secret, CALLBACK_USER, nonce, repr(made_at))
    if not hmac.compare_digest(proof, expected):
        return None
    with lock:
        for old in [n for n, at in seen.items() if now - at > 2 * PROOF_WINDOW_S]:
            del seen[old]  # only proofs that passed are kept: a stranger adds none
        if nonce in seen:
            return None
        seen[nonce] = now
    return nonce


def peer_of(conn: Any) -> str:
    """host:port of a connection's peer, for logs."""
    try:
        host, port = conn.sock.getpeername()[:2]
    except Exception:
        return "?"
    return f"{host}:{port}"


def callback_proxy(uri: Any, timeout_s: float, secret: str) -> Pyro5.client.Proxy:
    """The broker's proxy to a subscriber's callback (see :class:`CallbackProxy`)."""
    return make_proxy(
        uri, timeout_s, callback_credential(secret), lambda u: CallbackProxy(u, secret)
    )
