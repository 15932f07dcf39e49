"""The monitor's routes, without sockets: a request and an authenticated user in, a
``Response`` out (the HTTP server in :mod:`.server` carries them).

``GET``: ``/`` and ``/static/*`` (the live page), ``/metrics``, ``/api/channels``,
``/api/channels/NAME``, ``/api/channels/NAME/dead-letters`` (admin), ``/api/session``
(who is asking, and the token the page sends back with a ``POST``). ``POST``:
``/api/channels/NAME/dead-letters/replay`` (admin) with ``{"ids": [...]}`` or ``{}`` for
all. A POST must carry ``X-CSRF-Token`` (what ``/api/session`` gave this server's users)
and, when the browser sends one, an ``Origin`` of this server: another site's page can
make a browser send its stored credentials, but it cannot read the token, nor set the
header without a CORS preflight this server never grants.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import resources
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from channel_server.access import Access
from channel_server.errors import ChannelError
from channel_server.monitor.metrics import registry_for
from channel_server.monitor.views import channel_row, channel_status
from channel_server.users import Action, User

STATIC_FILES = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
MAX_REPLAY_IDS = 10_000
"""Most ids one replay request may name (a bigger list is refused, 413)."""


class MonitoredChannel(Protocol):
    """What the monitor reads of a channel (``EventChannel`` is one)."""

    def stats(self) -> dict[str, Any]: ...

    def dead_letters(self) -> list[dict[str, Any]]: ...

    def replay_dead_letters(self, ids: list[str] | None = None) -> int: ...


@dataclass(frozen=True)
class BrokerHandle:
    """The part of a broker the monitor sees: its id, its judge, its channels by name."""

    broker_id: str
    access: Access
    channels: Callable[[], dict[str, MonitoredChannel]]


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _json(status: int, value: Any) -> Response:
    return Response(status, "application/json", json.dumps(value, default=str).encode())


def error(status: int, reason: str) -> Response:
    return _json(status, {"error": reason})


class MonitorApp:
    """The routes, without sockets: a path and an authenticated user in, a Response out."""

    def __init__(self, handle: BrokerHandle) -> None:
        self._handle = handle
        folder = resources.files(__package__) / "static"
        self._static = {name: (folder / name).read_bytes() for name in STATIC_FILES}
        """The page's files, read once at start: a request never touches the disk."""

    def respond(self, target: str, user: User) -> Response:
        path = urlsplit(target).path
        parts = [unquote(p) for p in path.strip("/").split("/")] if path != "/" else []
        match parts:
            case []:
                return self._file("index.html")
            case ["static", name]:
                return self._file(name)
            case ["metrics"]:
                return self._metrics(user)
            case ["api", "channels"]:
                rows = [channel_row(n, self._handle.broker_id, s) for n, s in self._stats(user)]
                return _json(HTTPStatus.OK, rows)
            case ["api", "channels", name]:
                return self._channel(name, user)
            case ["api", "channels", name, "dead-letters"]:
                return self._dead_letters(name, user)
        return error(HTTPStatus.NOT_FOUND, f"no such page: {path}")

    def _file(self, name: str) -> Response:
        if name not in self._static:
            return error(HTTPStatus.NOT_FOUND, f"no such file: {name}")
        kind = STATIC_FILES[name] + "; charset=utf-8"
        return Response(HTTPStatus.OK, kind, self._static[name])

    def _visible(self, user: User) -> dict[str, MonitoredChannel]:
        return {n: c for n, c in sorted(self._handle.channels().items()) if user.allows_any(n)}

    def _stats(self, user: User) -> list[tuple[str, dict[str, Any] | None]]:
        return [(name, _stats_of(channel)) for name, channel in self._visible(user).items()]

    def _metrics(self, user: User) -> Response:
        def snapshot() -> list[dict[str, Any]]:
            return [stats for _, stats in self._stats(user) if stats is not None]

        body = generate_latest(registry_for(self._handle.broker_id, snapshot))
        return Response(HTTPStatus.OK, CONTENT_TYPE_LATEST, body)

    def _channel(self, name: str, user: User) -> Response:
        channel = self._visible(user).get(name)
        stats = None if channel is None else _stats_of(channel)
        if stats is None:
            return error(HTTPStatus.NOT_FOUND, f"unknown channel: {name}")
        return _json(HTTPStatus.OK, channel_status(self._handle.broker_id, stats))

    def _dead_letters(self, name: str, user: User) -> Response:
        channel = self._visible(user).get(name)
        if channel is None:
            return error(HTTPStatus.NOT_FOUND, f"unknown channel: {name}")
        if not user.allows(Action.ADMIN, name):
            reason = f"user {user.name!r} may not: admin on channel {name!r}"
            return error(HTTPStatus.FORBIDDEN, reason)
        try:
            return _json(HTTPStatus.OK, channel.dead_letters())
        except ChannelError as exc:
            return error(HTTPStatus.SERVICE_UNAVAILABLE, str(exc))


def _stats_of(channel: MonitoredChannel) -> dict[str, Any] | None:
    """A channel's stats, or None if it cannot answer (closed while the broker stops)."""
    try:
        return channel.stats()
    except ChannelError:
        return None
