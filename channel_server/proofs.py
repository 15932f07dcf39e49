"""Proofs that a caller, and then the daemon it called, know a shared secret that never
crosses the wire: the local token, or a subscriber's callback secret.

A secret sent as itself goes to whoever listens on the port: a process that got there
first (a name server or broker not started yet, or restarting) or one that took a dead
subscriber's port. Instead, in the handshake:
- the caller sends a fresh nonce, the time, the port it connected to and an HMAC of them
  (:func:`handshake`), made anew for every connection;
- the daemon admits a proof made for its own port within ``PROOF_WINDOW_S``, whose nonce
  it has not seen and, from a caller on this machine, made since it began to listen
  there, by the machine's monotonic clock, which every process shares and no step of the
  wall clock moves (:class:`Proofs`, :class:`Target`); it answers with an HMAC of that
  nonce under its own role;
- the caller goes on only if that answer checks out (:func:`answer_ok`).

A listener that does not know the secret learns nothing it can use, and is sent nothing:
what a process holding a daemon's port while it is away collects is good at no other
daemon (another port), nor at that one once it is back (made before it listened).
Light on purpose (no Pyro5): credentials use it in every client.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PROOF_WINDOW_S = 300.0
"""A proof is admitted this long after it was made (the clocks of two machines may differ
a little); its nonce is remembered twice as long, so it cannot be used twice."""
NONCE_CHARS = 32
PROOF_TARGET = "pubsub_proof_target"
"""The attribute of a served connection holding the :class:`Target` of its handshake (set
by the daemon before its gate reads it)."""


def mac(secret: str, *parts: str) -> str:
    return hmac.new(secret.encode(), "\n".join(parts).encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Target:
    """What a proof must have been made for, as the daemon reading it sees itself."""

    port: int
    """The port the caller connected to."""
    since: float | None = None
    """When the daemon began to listen there (the monotonic clock), for a caller on this
    machine; None for one elsewhere, whose monotonic clock is another."""


def handshake(secret: str, user: str, to: int) -> dict[str, Any]:
    """What a caller sends: a proof that ``user`` knows ``secret``, made for the daemon at
    port ``to``, new for each connection."""
    nonce, made_at, mono = secrets.token_hex(NONCE_CHARS // 2), time.time(), time.monotonic()
    proof = mac(secret, user, nonce, repr(made_at), str(to), repr(mono))
    return {"user": user, "nonce": nonce, "time": made_at, "to": to, "mono": mono, "proof": proof}


def answer(secret: str, role: str, nonce: str) -> dict[str, str]:
    """What the daemon answers to an admitted proof: its own, under ``role``."""
    return {"proof": mac(secret, role, nonce)}


def answer_ok(secret: str, role: str, sent: Any, response: Any) -> bool:
    """Whether the daemon's ``response`` to the handshake ``sent`` proves it knows
    ``secret`` (as ``role``)."""
    nonce = sent.get("nonce") if isinstance(sent, dict) else None
    proof = response.get("proof") if isinstance(response, dict) else None
    if not (isinstance(nonce, str) and isinstance(proof, str)):
        return False
    return hmac.compare_digest(proof, mac(secret, role, nonce))


class Proofs:
    """Checks callers' proofs of one secret for one user name (daemon side). Any thread
    may call ``admit``: ``_lock`` guards ``_seen``."""

    def __init__(self, secret: str, user: str, clock: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self._user = user
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}
        """Nonces of admitted proofs, and when; only proofs that passed are kept, so a
        stranger adds none."""

    def admit(self, data: Any, target: Target) -> str | None:
        """The nonce of a proof made with the secret for ``target``, within the window
        and not used before (then remembered); None otherwise."""
        if (made := self._made(data, target.port)) is None:
            return None
        nonce, made_at, mono = made
        now = self._clock()
        if abs(now - made_at) > PROOF_WINDOW_S:
            return None
        if target.since is not None and mono < target.since:
            return None
        with self._lock:
            while self._seen:  # oldest first (insertion order): drop the expired ones
                oldest, at = next(iter(self._seen.items()))
                if now - at <= 2 * PROOF_WINDOW_S:
                    break
                del self._seen[oldest]
            if nonce in self._seen:
                return None
            self._seen[nonce] = now
        return nonce

    def refusal(self, data: Any, otherwise: str, target: Target) -> str:
        """Why ``data`` was not admitted: ``otherwise``, unless it proves the secret and
        was refused only for where or when it was made: for another daemon, before this
        one listened, or with clocks further apart than the window (which a user would
        not guess from "wrong credential")."""
        to = data.get("to") if isinstance(data, dict) else None
        if type(to) is int and to != target.port and self._made(data, to) is not None:
            return f"the proof was made for the daemon at port {to}, not this one ({target.port})"
        if (made := self._made(data, target.port)) is None:
            return otherwise
        if target.since is not None and made[2] < target.since:
            return "the proof was made before this daemon began to listen: one used elsewhere"
        gap = made[1] - self._clock()
        if abs(gap) <= PROOF_WINDOW_S:
            return otherwise
        return (
            f"the proof was made {abs(gap):,.0f} s {'ahead of' if gap > 0 else 'behind'} "
            f"this daemon's clock (at most {PROOF_WINDOW_S:.0f} s apart): the clocks of the "
            "two machines differ"
        )

    def _made(self, data: Any, port: int) -> tuple[str, float, float] | None:
        """(nonce, time, monotonic time) of a well-formed proof made with the secret for
        ``port``, whenever made."""
        if not isinstance(data, dict) or data.get("user") != self._user:
            return None
        nonce, made_at, proof = data.get("nonce"), data.get("time"), data.get("proof")
        if not (isinstance(nonce, str) and len(nonce) == NONCE_CHARS and isinstance(proof, str)):
            return None
        mono = data.get("mono")
        if type(made_at) is not float or type(mono) is not float:
            return None
        if data.get("to") != port or type(port) is not int:
            return None
        expected = mac(self._secret, self._user, nonce, repr(made_at), str(port), repr(mono))
        if not hmac.compare_digest(proof, expected):
            return None
        return nonce, made_at, mono
