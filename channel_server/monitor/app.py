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

import hmac
import json
import secrets
from collections.abc import Callable, Mapping
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
    channels: Callable[[], Mapping[str, MonitoredChannel]]


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


PLAIN_HTTP_ADMIN = (
    "dead letters and their replay are served over HTTPS only (start the broker with "
    "--tls-cert/--tls-key), or use python -m channel_server dead-letters: over plain HTTP, "
    "the credential asking may have been read by a process that held this port while the "
    "broker was away"
)
"""Why a plain-HTTP monitor refuses the admin routes: they hand out payloads and change
the channel, and a credential sent over plain HTTP is whoever's holds the port (session
33's attacker read dead letters and replayed them with a scraper's monitor token)."""


def _json(status: int, value: Any) -> Response:
    return Response(status, "application/json", json.dumps(value, default=str).encode())


def error(status: int, reason: str) -> Response:
    return _json(status, {"error": reason})


class MonitorApp:
    """The routes, without sockets: a path and an authenticated user in, a Response out."""

    def __init__(
        self, handle: BrokerHandle, hosts: frozenset[str] = frozenset(), scheme: str = "http"
    ) -> None:
        self._handle = handle
        self._scheme = scheme
        self.hosts = hosts
        """The ``host:port`` names a POST may be addressed to (its ``Host`` header), so a
        page of another name that resolves here (DNS rebinding) cannot post; empty: any
        (the server sets them once it knows its port)."""
        folder = resources.files(__package__) / "static"
        self._static = {name: (folder / name).read_bytes() for name in STATIC_FILES}
        """The page's files, read once at start: a request never touches the disk."""
        self.csrf_token = secrets.token_urlsafe(32)
        """What a POST must carry in ``X-CSRF-Token``; ``/api/session`` gives it to this
        server's authenticated users (new at each start)."""

    def respond(self, target: str, user: User) -> Response:
        path, parts = _route(target)
        match parts:
            case ["api", "session"]:
                return _json(HTTPStatus.OK, {"user": user.name, "csrf": self.csrf_token})
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

    def respond_post(
        self, target: str, user: User, headers: Mapping[str, str], body: bytes
    ) -> Response:
        """A POST: only from this server's page (token, origin, host), then the route."""
        path, parts = _route(target)
        if refused := self._cross_site(headers):
            return error(HTTPStatus.FORBIDDEN, refused)
        match parts:
            case ["api", "channels", name, "dead-letters", "replay"]:
                return self._replay(name, user, body)
        return error(HTTPStatus.NOT_FOUND, f"no such action: {path}")

    def _cross_site(self, headers: Mapping[str, str]) -> str | None:
        """Why a POST may come from another site's page, or None."""
        if not hmac.compare_digest(headers.get("X-CSRF-Token", ""), self.csrf_token):
            return "a POST needs the X-CSRF-Token that GET /api/session gives"
        host = headers.get("Host", "")
        if self.hosts and host not in self.hosts:
            return f"a POST addressed to {host!r}, not to this server"
        origin = headers.get("Origin")
        if origin is not None and origin != f"{self._scheme}://{host}":
            return f"a POST from a page of {origin!r}, not of this server"
        return None

    def _replay(self, name: str, user: User, body: bytes) -> Response:
        channel = self._admin_channel(name, user)
        if isinstance(channel, Response):
            return channel  # the refusal
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return error(HTTPStatus.BAD_REQUEST, "the body must be JSON")
        ids = request.get("ids") if isinstance(request, dict) else 0
        if ids is not None and (
            not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)
        ):
            return error(HTTPStatus.BAD_REQUEST, 'the body must be {} or {"ids": [string, ...]}')
        if ids is not None and len(ids) > MAX_REPLAY_IDS:
            return error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_REPLAY_IDS} ids")
        try:
            return _json(HTTPStatus.OK, {"replayed": channel.replay_dead_letters(ids)})
        except ChannelError as exc:
            return error(HTTPStatus.BAD_REQUEST, str(exc))

    def _admin_channel(self, name: str, user: User) -> MonitoredChannel | Response:
        """The channel when the user may administer it, else the refusal."""
        channel = self._visible(user).get(name)
        if channel is None:
            return error(HTTPStatus.NOT_FOUND, f"unknown channel: {name}")
        if not user.allows(Action.ADMIN, name):
            reason = f"user {user.name!r} may not: admin on channel {name!r}"
            return error(HTTPStatus.FORBIDDEN, reason)
        if self._scheme != "https":
            return error(HTTPStatus.FORBIDDEN, PLAIN_HTTP_ADMIN)
        return channel

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
        channel = self._admin_channel(name, user)
        if isinstance(channel, Response):
            return channel  # the refusal
        try:
            return _json(HTTPStatus.OK, channel.dead_letters())
        except ChannelError as exc:
            return error(HTTPStatus.SERVICE_UNAVAILABLE, str(exc))


def _route(target: str) -> tuple[str, list[str]]:
    """A request target's path and its decoded parts (none for ``/``)."""
    path = urlsplit(target).path
    return path, [unquote(p) for p in path.strip("/").split("/")] if path != "/" else []


def _stats_of(channel: MonitoredChannel) -> dict[str, Any] | None:
    """A channel's stats, or None if it cannot answer (closed while the broker stops)."""
    try:
        return channel.stats()
    except ChannelError:
        return None
