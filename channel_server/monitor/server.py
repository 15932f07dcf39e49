"""The broker's HTTP monitor (the routes are in :mod:`.app`) on a small bounded HTTP
server the broker owns.

Threads: one accept loop (:class:`~.lobby.HeadLobby`, which holds a connection without a
thread until its request head is here), started by :meth:`MonitorServer.start` and
stopped by :meth:`MonitorServer.stop`, and one short-lived thread per request, at most
``max_connections`` at once (one more is answered 503 by the accept loop, after waiting
``BUSY_GRACE_S`` for a slot). Every
request authenticates (see ``http_auth``) and sees only the channels its user has some
permission on; dead letters need ``admin`` on the channel, as over Pyro5. A GET has no
body; a POST (the page's replay) a small one sized by its Content-Length, read only once
its caller is authenticated; a request is capped in bytes and time (``HttpConfig``).
HTTP/1.0: one request per connection, so no idle keep-alive connection holds a thread.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import socketserver
import ssl
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, BinaryIO, Protocol, cast

from channel_server.credentials import OWNER
from channel_server.errors import LimitReached, NotAuthorized
from channel_server.monitor.app import BrokerHandle, MonitorApp, Response, error
from channel_server.monitor.http_auth import authenticate
from channel_server.monitor.lobby import Arrival, HeadLobby, LobbyLimits
from channel_server.monitor.settings import HttpConfig
from channel_server.transport import bind_failure
from channel_server.users import User

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 5.0
POLL_S = 0.2
"""The accept loop's longest wait with nothing to do (it is woken to stop)."""
BUSY_GRACE_S = 0.1
"""How long a connection past the cap waits for a slot before its 503 (in the accept loop,
which takes no other connection meanwhile): the thread of a request whose reply was read
may still hold its slot when the same client's next request arrives (with room for one
at once, some of 100 requests one after another got a 503)."""
REALM = "pubsub-channels"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class RequestTooLarge(ValueError):
    """A request head past ``max_request_bytes`` (internal to this server: it becomes a
    431 reply, never crosses the wire)."""


class _Reader(Protocol):
    """What http.server reads a request with."""

    def readline(self, size: int = -1, /) -> bytes: ...

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class _LimitedReader:
    """A request's input stream that refuses to read more than ``max_bytes`` in all, or
    past ``deadline`` (a client trickling a byte at a time must not hold a thread)."""

    def __init__(self, raw: _Reader, max_bytes: int, deadline: float) -> None:
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


class _Prefixed:
    """A connection's input: first what the accept loop read (the request head, perhaps
    some of a body), then the socket."""

    def __init__(self, first: bytes, rest: _Reader) -> None:
        self._first, self._rest = first, rest

    def readline(self, size: int = -1) -> bytes:
        if not self._first:
            return self._rest.readline(size)
        end = self._first.find(b"\n") + 1 or len(self._first)
        if 0 <= size < end:
            end = size
        line, self._first = self._first[:end], self._first[end:]
        if line.endswith(b"\n") or size == len(line):
            return line
        return line + self._rest.readline(-1 if size < 0 else size - len(line))

    def read(self, size: int = -1) -> bytes:
        take = len(self._first) if size < 0 else min(size, len(self._first))
        data, self._first = self._first[:take], self._first[take:]
        if size < 0:
            return data + self._rest.read()
        return data + (self._rest.read(size - take) if size > take else b"")

    def close(self) -> None:
        self._rest.close()


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    server_version = "pubsub-channels"
    sys_version = ""
    protocol_version = "HTTP/1.0"

    def __init__(self, request: Any, address: Any, server: _HttpServer, arrival: Arrival) -> None:
        self.arrival = arrival
        """What the accept loop read of this connection, and its deadline."""
        self._claimed: str | None = None
        """The user this request counts against (``_Slots.claim``), once authenticated."""
        super().__init__(request, address, server)  # serves the request

    def setup(self) -> None:
        config = self.server.config
        # each send and receive on the socket; per connection, from the config
        self.timeout = config.request_timeout_s  # type: ignore[misc]
        self.command, self.request_version = "", self.default_request_version
        arrival = self.arrival
        super().setup()
        head = _Prefixed(bytes(arrival.received), cast(BinaryIO, self.rfile))
        # duck-typed: http.server only calls readline and read on it
        self.rfile = _LimitedReader(head, config.max_request_bytes, arrival.deadline)  # type: ignore[assignment]

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
            self._send(error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "a GET takes no body"))
            return
        if (user := self._user()) is not None:
            self._send(self.server.app.respond(self.path, user))

    def do_POST(self) -> None:
        """An action of the page (replay dead letters): a small JSON body, sized up front."""
        length = self.headers.get("Content-Length", "").strip()
        if self.headers.get("Transfer-Encoding") or not length.isdigit():
            self._send(error(HTTPStatus.LENGTH_REQUIRED, "a POST needs a Content-Length"))
            return
        if int(length) > self.server.config.max_request_bytes:
            self._send(error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "the body is too large"))
            return
        if (user := self._user()) is not None:
            body = self.rfile.read(int(length))
            headers = {k: self.headers.get(k, "") for k in ("X-CSRF-Token", "Host")}
            if (origin := self.headers.get("Origin")) is not None:
                headers["Origin"] = origin
            self._send(self.server.app.respond_post(self.path, user, headers, body))

    def _user(self) -> User | None:
        """The authenticated user, or None once the 401 (or 503: no password check free,
        or the user holds its share of the request threads) is sent."""
        try:
            user = authenticate(self.server.handle.access, self.headers.get("Authorization"))
        except NotAuthorized as exc:
            log.warning("refused HTTP %s from %s: %s", self.path, self._peer(), exc.reason)
            response = error(HTTPStatus.UNAUTHORIZED, str(exc))
            response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
            self._send(response)
            return None
        except LimitReached as exc:  # too many passwords being checked at once
            self._busy(str(exc))
            return None
        if user.name != OWNER:
            if not self.server.slots.claim(user.name):
                self._busy(f"user {user.name!r} holds its share of the monitor's requests")
                return None
            self._claimed = user.name
        return user

    def _busy(self, reason: str) -> None:
        response = error(HTTPStatus.SERVICE_UNAVAILABLE, reason)
        response.headers["Retry-After"] = "1"
        self._send(response)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._claimed is not None:
                self.server.slots.unclaim(self._claimed)

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
    """Requests being served, at most ``limit``, and at most half of them one user's;
    ``_cond`` guards ``_busy`` and ``_users``."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._busy = 0
        self._users: dict[str, int] = {}
        """Requests each user (but the owner) is being served, once authenticated."""
        self._cond = threading.Condition(threading.Lock())

    def claim(self, user: str) -> bool:
        """Count a request being served (a slot taken already) as ``user``'s; False when
        that user holds half of the slots already: one user's POSTs whose bodies never
        came held every request thread until their timeouts (session 33's attacker)."""
        with self._cond:
            held = self._users.get(user, 0)
            if held >= max(1, self._limit // 2):
                return False
            self._users[user] = held + 1
            return True

    def unclaim(self, user: str) -> None:
        with self._cond:
            if (held := self._users.pop(user, 0) - 1) > 0:
                self._users[user] = held

    def try_enter(self, wait_s: float) -> bool:
        """Take a slot, waiting up to ``wait_s`` for one to free."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._busy < self._limit, wait_s):
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


class _HttpServer(HTTPServer):
    """The listening socket, its accept loop (``lobby``) and a thread per request, at most
    ``max_connections`` at once."""

    request_queue_size = 16

    def __init__(self, config: HttpConfig, handle: BrokerHandle, app: MonitorApp) -> None:
        self.config, self.handle, self.app = config, handle, app
        self.slots = _Slots(config.max_connections)
        if ":" in config.host:
            self.address_family = socket.AF_INET6
        # (not called by the server: each request thread makes its _Handler with what
        # the accept loop read of the connection)
        super().__init__((config.host, config.port), cast(Any, _Handler))
        if config.cert is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(config.cert, config.key)
            # each connection's handshake is taken step by step by the accept loop
            self.socket = context.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )
        self.socket.setblocking(False)
        limits = LobbyLimits(config.max_waiting, config.request_timeout_s, config.max_request_bytes)
        self.lobby = HeadLobby(self.socket, limits, self._serve, POLL_S)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # not HTTPServer's: no reverse DNS lookup
        self.server_name, self.server_port = self.config.host, self.server_address[1]

    def _serve(self, sock: socket.socket, arrival: Arrival) -> None:
        """A connection whose head is here: a request thread, or 503 when all are busy."""
        if not self.slots.try_enter(BUSY_GRACE_S):
            log.warning("HTTP monitor busy: refused %s", arrival.address[0])
            try:
                sock.settimeout(POLL_S)
                sock.sendall(BUSY_REPLY)
            except OSError:
                pass
            self.shutdown_request(sock)
            return
        try:
            threading.Thread(
                target=self._request_thread, args=(sock, arrival), name="http-request", daemon=True
            ).start()
        except BaseException:  # no thread started: nobody else frees the slot
            self.slots.leave()
            self.shutdown_request(sock)
            raise

    def _request_thread(self, sock: socket.socket, arrival: Arrival) -> None:
        try:
            _Handler(sock, arrival.address, self, arrival)
        except Exception:
            self.handle_error(sock, arrival.address)
        finally:
            self.shutdown_request(sock)
            self.slots.leave()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("HTTP request from %s failed", client_address, exc_info=True)


def own_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` names a POST may carry: the bound address (and localhost for a
    loopback one); any for a wildcard bind, where no one name is the server's."""
    if host in ("0.0.0.0", "::", ""):
        return frozenset()
    names = {f"[{host}]" if ":" in host else host}
    if ipaddress.ip_address(host).is_loopback if _is_ip(host) else host == "localhost":
        names |= {"localhost", "127.0.0.1", "[::1]"}
    return frozenset(f"{name}:{port}" for name in names)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class MonitorServer:
    """The HTTP monitor of one broker: bound by :meth:`start`, closed by :meth:`stop`."""

    def __init__(self, config: HttpConfig, handle: BrokerHandle) -> None:
        self.config = config
        self._handle = handle
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; OSError (naming the address) when it cannot bind."""
        app = MonitorApp(self._handle, scheme=self.config.scheme)
        try:
            self._server = _HttpServer(self.config, self._handle, app)
        except OSError as exc:
            raise bind_failure(exc, "HTTP monitor", self.config.host, self.config.port) from exc
        app.hosts = own_hosts(self.config.host, self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.lobby.run, name="http-monitor", daemon=True
        )
        self._thread.start()
        log.info("HTTP monitor at %s", self.url)

    @property
    def url(self) -> str:
        """``http[s]://HOST:PORT/`` with the port actually bound."""
        if self._server is None:
            return ""
        host = self.config.host
        host = f"[{host}]" if ":" in host else host
        return f"{self.config.scheme}://{host}:{self._server.server_address[1]}/"

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop accepting, let the requests being served finish (until ``timeout_s``),
        close the socket."""
        server, self._server = self._server, None
        if server is None:
            return
        deadline = time.monotonic() + timeout_s
        if self._thread is not None and self._thread.is_alive():
            server.lobby.stop()
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if not server.slots.wait_idle(max(0.0, deadline - time.monotonic())):
            log.warning("HTTP monitor stopped with requests still being served")
        server.server_close()
