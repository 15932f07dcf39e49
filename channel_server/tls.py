"""TLS for every daemon and proxy of a process, through Pyro5's SSL settings.

One switch per process (Pyro5's ``SSL`` is global): with TLS on, the name server, the
brokers, the publishers and the subscribers' callback daemons must all use it. A process
that serves (a broker, a name server, a push subscriber) needs a certificate and its key;
the same pair is its client certificate when it connects. ``--tls-ca`` is what it trusts
(default: the system's CAs) and, on a daemon, turns on mutual TLS: the daemon then admits
only clients whose certificate that CA signed. The certificate of a daemon must name the
address it is reached at (``IP:127.0.0.1``, ``DNS:localhost`` ...): clients check it.

Pyro5 builds its SSL contexts once, at the first daemon or proxy, so :meth:`TlsOptions.apply`
runs before any. It also gives Pyro5's contexts sockets of its own (:class:`_PyroTlsSocket`):
a daemon handshakes on the connection's worker thread, not in Pyro5's accept loop (where
one peer that connects and says nothing would stall every client: no timeout there); a
plain-text client of a TLS daemon is told TLS is required; a client whose TLS peer is
not trusted, or does not trust it, fails at once with the reason, as a refusal.

``$PUBSUB_TLS_CERT``, ``$PUBSUB_TLS_KEY`` and ``$PUBSUB_TLS_CA`` are the defaults of the
flags (set them once for a shell or child processes); a library user's process applies
them by itself before its first daemon or proxy (:func:`from_environment`).

Light on purpose (Pyro5 and the wire vocabulary only, no broker imports): every CLI imports it.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import ssl
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import Pyro5
import Pyro5.socketutil

from channel_server.errors import InvalidArgument
from channel_server.tls_sockets import PyroTlsSocket

log = logging.getLogger(__name__)
CERT_ENV = "PUBSUB_TLS_CERT"
KEY_ENV = "PUBSUB_TLS_KEY"
CA_ENV = "PUBSUB_TLS_CA"
ARGUMENT = "tls"
"""The ``argument`` of the InvalidArgument a bad combination raises."""

_applied: TlsOptions | None = None
"""What :meth:`TlsOptions.apply` set in this process (Pyro5 keeps its contexts)."""


@dataclass(frozen=True)
class TlsOptions:
    cert: Path | None = None
    """PEM certificate (chain) of this process: its server and its client certificate."""
    key: Path | None = None
    """PEM private key of ``cert``, unencrypted."""
    ca: Path | None = None
    """PEM file (or c_rehash'ed directory) of the CAs to trust; on a daemon: mutual TLS."""

    @property
    def enabled(self) -> bool:
        return any((self.cert, self.key, self.ca))

    @property
    def mutual(self) -> bool:
        """A daemon of this process requires a client certificate signed by ``ca``."""
        return self.ca is not None

    def validate(self, serving: bool = False) -> TlsOptions:
        """Raise InvalidArgument with a one-line reason when the files cannot work
        together; ``serving``: this process runs a daemon, which needs cert and key."""
        if not self.enabled:
            return self
        if (self.cert is None) != (self.key is None):
            raise InvalidArgument(ARGUMENT, "--tls-cert and --tls-key go together")
        if serving and self.cert is None:
            raise InvalidArgument(
                ARGUMENT, "a process that serves needs --tls-cert and --tls-key (not only --tls-ca)"
            )
        for path in filter(None, (self.cert, self.key, self.ca)):
            _check_readable(path)
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if self.cert is not None:
            try:  # a password callback that refuses: an encrypted key is not prompted for
                context.load_cert_chain(self.cert, self.key, password=_no_password)
            except (ssl.SSLError, ValueError, OSError) as exc:
                raise InvalidArgument(
                    ARGUMENT,
                    f"{self.cert} and {self.key} are not a PEM certificate and its "
                    f"unencrypted key ({_reason(exc)})",
                ) from None
            if self.key is not None and self.key.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                log.warning("%s is readable by other users: make it 0600", self.key)
        if self.ca is not None:
            where = {"capath" if self.ca.is_dir() else "cafile": str(self.ca)}
            try:
                context.load_verify_locations(**where)
            except (ssl.SSLError, OSError) as exc:
                raise InvalidArgument(
                    ARGUMENT, f"{self.ca}: not PEM CA certificates ({_reason(exc)})"
                ) from None
        return self

    def pyro_settings(self) -> dict[str, Any]:
        """The Pyro5 config items this sets (nothing when TLS is off)."""
        if not self.enabled:
            return {}
        cert, key = str(self.cert or ""), str(self.key or "")
        return {
            "SSL": True,
            "SSL_SERVERCERT": cert,
            "SSL_SERVERKEY": key,
            "SSL_CLIENTCERT": cert,
            "SSL_CLIENTKEY": key,
            "SSL_CACERTS": str(self.ca or ""),
            "SSL_REQUIRECLIENTCERT": self.mutual,
            # TLS sends a message as several records: with Nagle's algorithm each call
            # then waits for the peer's delayed ACK (40 ms), which made TLS 20x slower
            "SOCK_NODELAY": True,
        }

    def apply(self) -> None:
        """Set Pyro5's SSL config for this process; before its first daemon or proxy.
        Once per process: applying other options later raises RuntimeError (Pyro5 would
        go on with the contexts it built). TLS off changes nothing."""
        global _applied
        if not self.enabled or _applied == self:
            return
        if _applied is not None:
            raise RuntimeError(f"TLS is already set up in this process ({_applied})")
        for name, value in self.pyro_settings().items():
            setattr(Pyro5.config, name, value)
        _install()
        _applied = self


def _install() -> None:
    """Make every SSL context Pyro5 builds create :class:`PyroTlsSocket` s. Idempotent."""
    original = Pyro5.socketutil.get_ssl_context
    if getattr(original, "pubsub_sockets", False):
        return

    @functools.wraps(original)
    def get_ssl_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        context = original(*args, **kwargs)
        context.sslsocket_class = PyroTlsSocket
        return context

    get_ssl_context.pubsub_sockets = True  # type: ignore[attr-defined]
    Pyro5.socketutil.get_ssl_context = get_ssl_context


def from_environment(serving: bool = False) -> None:
    """Apply ``$PUBSUB_TLS_*`` in a process that has not set TLS up (a library user's):
    called before every daemon and proxy is made; nothing when they are unset."""
    if _applied is None and (options := from_env()).enabled:
        options.validate(serving).apply()


def from_env(env: Mapping[str, str] | None = None) -> TlsOptions:
    """``$PUBSUB_TLS_CERT``, ``$PUBSUB_TLS_KEY`` and ``$PUBSUB_TLS_CA`` (unset or empty:
    none)."""
    env = os.environ if env is None else env
    return TlsOptions(*(_path(env.get(name)) for name in (CERT_ENV, KEY_ENV, CA_ENV)))


def from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> TlsOptions:
    """``--tls-cert``, ``--tls-key`` and ``--tls-ca``, each defaulting to its env var."""
    default = from_env(env)
    return TlsOptions(
        getattr(args, "tls_cert", None) or default.cert,
        getattr(args, "tls_key", None) or default.key,
        getattr(args, "tls_ca", None) or default.ca,
    )


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _check_readable(path: Path) -> None:
    try:
        if path.is_dir():
            os.listdir(path)
        else:
            with path.open("rb") as f:
                f.read(1)
    except OSError as exc:
        raise InvalidArgument(ARGUMENT, f"{path}: cannot read it ({_reason(exc)})") from None


def _no_password() -> bytes:
    raise ValueError("the key is encrypted")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
