"""Configuration of the broker's HTTP monitor (``serve --http``): light, no imports of the
server, so the broker's config can name it."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class HttpConfig:
    """Where the monitor listens and how much one caller may make it hold."""

    host: str = "127.0.0.1"
    """Bind address; a non-loopback one needs TLS (``cert``) or ``--insecure`` (plain
    HTTP: credentials would cross the network in clear text)."""
    port: int = 0
    """0 picks a free port (the broker logs and prints the address it got)."""
    max_connections: int = 16
    """Requests served at once, a thread each; one more gets 503 (after waiting 0.1 s for
    a slot). Small: the monitor is for a few operators, a page and a Prometheus scraper,
    not for traffic."""
    max_waiting: int = 256
    """Connections still sending their request head (a file descriptor each, no thread);
    the oldest is closed to make room for one more, so silent connections cannot lock
    the monitor's requests out."""
    request_timeout_s: float = 5.0
    """A connection must have sent its whole request within this, and each send or
    receive on it must progress within this (a slow or silent client is dropped)."""
    max_request_bytes: int = 16 << 10
    """Largest request, head and body (a GET has none; the page's replay POST a small
    JSON one)."""
    cert: str | None = None
    """PEM certificate (chain) for HTTPS: the broker's ``--tls-cert``; None: plain HTTP."""
    key: str | None = None
    """Its unencrypted PEM key (``--tls-key``)."""

    @property
    def scheme(self) -> str:
        return "https" if self.cert else "http"


class BadAddress(ValueError):
    """A ``HOST:PORT`` that is not one."""


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6; PORT 0: any free port) as (host, port)."""
    host, sep, port_text = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise BadAddress(f"not HOST:PORT: {text!r}")
    if ":" in host:  # only an IPv6 address may hold colons
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BadAddress(f"not HOST:PORT: {text!r}") from None
    return host, int(port_text)
