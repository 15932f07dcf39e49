"""The broker's HTTP monitor: ``/metrics``, ``/api/channels[/NAME[/dead-letters]]`` and
the live page at ``/``, on a small bounded HTTP server the broker owns.

Threads: one accept loop (``serve_forever``), started by :meth:`MonitorServer.start` and
stopped by :meth:`MonitorServer.stop`, and one short-lived thread per request, at most
``max_connections`` at once (one more is answered 503 by the accept loop, at once). Every
request authenticates (see ``http_auth``) and sees only the channels its user has some
permission on; dead letters need ``admin`` on the channel, as over Pyro5. Every request is
a GET without a body; its head is capped in bytes and time (``HttpConfig``). HTTP/1.0: one
request per connection, so no idle keep-alive connection holds a thread.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, BinaryIO, Protocol, cast
from urllib.parse import unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from channel_server.access import Access
from channel_server.errors import ChannelError, NotAuthorized
from channel_server.monitor.http_auth import authenticate
from channel_server.monitor.metrics import registry_for
from channel_server.monitor.settings import HttpConfig
from channel_server.monitor.views import channel_row, channel_status
from channel_server.transport import bind_failure
from channel_server.users import Action, User

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 5.0
POLL_S = 0.2
"""How often the accept loop checks for shutdown (stop lags at most this)."""
REALM = "pubsub-channels"
STATIC_FILES = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class MonitoredChannel(Protocol):
    """What the monitor reads of a channel (``EventChannel`` is one)."""

    def stats(self) -> dict[str, Any]: ...

    def dead_letters(self) -> list[dict[str, Any]]: ...


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


def _error(status: int, reason: str) -> Response:
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
        return _error(HTTPStatus.NOT_FOUND, f"no such page: {path}")

    def _file(self, name: str) -> Response:
        if name not in self._static:
            return _error(HTTPStatus.NOT_FOUND, f"no such file: {name}")
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
            return _error(HTTPStatus.NOT_FOUND, f"unknown channel: {name}")
        return _json(HTTPStatus.OK, channel_status(self._handle.broker_id, stats))

    def _dead_letters(self, name: str, user: User) -> Response:
        channel = self._visible(user).get(name)
        if channel is None:
            return _error(HTTPStatus.NOT_FOUND, f"unknown channel: {name}")
        if not user.allows(Action.ADMIN, name):
            reason = f"user {user.name!r} may not: admin on channel {name!r}"
            return _error(HTTPStatus.FORBIDDEN, reason)
        try:
            return _json(HTTPStatus.OK, channel.dead_letters())
        except ChannelError as exc:
            return _error(HTTPStatus.SERVICE_UNAVAILABLE, str(exc))


def _stats_of(channel: MonitoredChannel) -> dict[str, Any] | None:
    """A channel's stats, or None if it cannot answer (closed while the broker stops)."""
    try:
        return channel.stats()
    except ChannelError:
        return None


class RequestTooLarge(ValueError):
    """A request head past ``max_request_bytes`` (internal to this server: it becomes a
    431 reply, never crosses the wire)."""


class _LimitedReader:
    """A request's input stream that refuses to read more than ``max_bytes`` in all, or
    past ``deadline`` (a client trickling a byte at a time must not hold a thread)."""

    def __init__(self, raw: BinaryIO, max_bytes: int, deadline: float) -> None:
        self._raw = raw
        self._left = max_bytes
        self._deadline = deadline

    def _budget(self, size: int) -> int:
        if time.monotonic() > self._deadline:
            raise TimeoutError("request not received in time")
        if self._left <= 0:
            raise RequestTooLarge("request head too large")
        return self._left if size is None or size < 0 else min(size, self._left)

    def readline(self, size: int = -1) -> bytes:
        line = self._raw.readline(self._budget(size))
        self._left -= len(line)
        return line

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(self._budget(size))
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._raw.close()


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    server_version = "pubsub-channels"
    sys_version = ""
    protocol_version = "HTTP/1.0"

    def setup(self) -> None:
        config = self.server.config
        # each send and receive on the socket; per connection, from the config
        self.timeout = config.request_timeout_s  # type: ignore[misc]
        self.command, self.request_version = "", self.default_request_version
        super().setup()
        deadline = time.monotonic() + config.request_timeout_s
        raw = cast(BinaryIO, self.rfile)
        # duck-typed: http.server only calls readline and read on it
        self.rfile = _LimitedReader(raw, config.max_request_bytes, deadline)  # type: ignore[assignment]

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except RequestTooLarge:
            self.close_connection = True
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)

    def do_GET(self) -> None:
        if self.headers.get("Content-Length", "0").strip() != "0" or self.headers.get(
            "Transfer-Encoding"
        ):
            self._send(_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "a GET takes no body"))
            return
        try:
            user = authenticate(self.server.handle.access, self.headers.get("Authorization"))
        except NotAuthorized as exc:
            log.warning("refused HTTP %s from %s: %s", self.path, self._peer(), exc.reason)
            response = _error(HTTPStatus.UNAUTHORIZED, str(exc))
            response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
            self._send(response)
            return
        self._send(self.server.app.respond(self.path, user))

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in (SECURITY_HEADERS | response.headers).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    def version_string(self) -> str:
        return self.server_version  # no Python version for strangers to read

    def _peer(self) -> str:
        return f"{self.client_address[0]}:{self.client_address[1]}"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self._peer(), format % args)


class _Slots:
    """Requests being served, at most ``limit``; ``_cond`` guards ``_busy``."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._busy = 0
        self._cond = threading.Condition(threading.Lock())

    def try_enter(self) -> bool:
        with self._cond:
            if self._busy >= self._limit:
                return False
            self._busy += 1
            return True

    def leave(self) -> None:
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout_s)


BUSY_REPLY = (
    b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n"
    b"Connection: close\r\n\r\n"
)


class _HttpServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with a cap on the requests served at once."""

    daemon_threads = True
    block_on_close = False  # MonitorServer.stop waits for requests, with a deadline
    request_queue_size = 16

    def __init__(self, config: HttpConfig, handle: BrokerHandle, app: MonitorApp) -> None:
        self.config, self.handle, self.app = config, handle, app
        self.slots = _Slots(config.max_connections)
        if ":" in config.host:
            self.address_family = socket.AF_INET6
        super().__init__((config.host, config.port), _Handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # not HTTPServer's: no reverse DNS lookup
        self.server_name, self.server_port = self.config.host, self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.try_enter():
            log.warning("HTTP monitor busy: refused %s", client_address[0])
            try:
                request.settimeout(POLL_S)
                request.sendall(BUSY_REPLY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: the slot is not taken
            self.slots.leave()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.leave()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("HTTP request from %s failed", client_address, exc_info=True)


class MonitorServer:
    """The HTTP monitor of one broker: bound by :meth:`start`, closed by :meth:`stop`."""

    def __init__(self, config: HttpConfig, handle: BrokerHandle) -> None:
        self.config = config
        self._handle = handle
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; OSError (naming the address) when it cannot bind."""
        try:
            self._server = _HttpServer(self.config, self._handle, MonitorApp(self._handle))
        except OSError as exc:
            raise bind_failure(exc, "HTTP monitor", self.config.host, self.config.port) from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_S,), name="http-monitor", daemon=True
        )
        self._thread.start()
        log.info("HTTP monitor at %s", self.url)

    @property
    def url(self) -> str:
        """``http://HOST:PORT/`` with the port actually bound."""
        if self._server is None:
            return ""
        host = self.config.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self._server.server_address[1]}/"

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop accepting, let the requests being served finish (until ``timeout_s``),
        close the socket."""
        server, self._server = self._server, None
        if server is None:
            return
        deadline = time.monotonic() + timeout_s
        if self._thread is not None and self._thread.is_alive():
            server.shutdown()  # returns within POLL_S: the loop checks it that often
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if not server.slots.wait_idle(max(0.0, deadline - time.monotonic())):
            log.warning("HTTP monitor stopped with requests still being served")
        server.server_close()
