"""The HTTP monitor's server on a real socket (port 0), over fake channels: it
authenticates, bounds what one client may make it hold, and stops within its budget."""

from __future__ import annotations

import dataclasses
import http.client
import io
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from channel_server import users as um
from channel_server.monitor.server import (
    MonitorServer,
    RequestTooLarge,
    _LimitedReader,
    _Prefixed,
)
from channel_server.monitor.settings import HttpConfig
from tests.integration.procs import wait_until
from tests.unit.monitor_fakes import MONITOR_TOKEN, FakeChannel, basic, handle

CONFIG = HttpConfig(max_connections=2, request_timeout_s=1.0, max_request_bytes=2048)


@pytest.fixture(autouse=True)
def cheap_hashes() -> Iterator[None]:
    um.set_test_parameters()
    yield
    um.set_test_parameters(False)


def serving(config: HttpConfig) -> Iterator[MonitorServer]:
    monitor = MonitorServer(config, handle(FakeChannel("orders")))
    monitor.start()
    yield monitor
    monitor.stop()


@pytest.fixture
def server() -> Iterator[MonitorServer]:
    """Room for 16 requests at once (the cap's own tests have ``capped`` and 1)."""
    yield from serving(dataclasses.replace(CONFIG, max_connections=16))


@pytest.fixture
def capped() -> Iterator[MonitorServer]:
    """CONFIG's 2 requests at once."""
    yield from serving(CONFIG)


def port(server: MonitorServer) -> int:
    return int(server.url.rstrip("/").rsplit(":", 1)[1])


def get(server: MonitorServer, path: str, auth: str | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port(server), timeout=5)
    conn.request("GET", path, headers={"Authorization": auth} if auth else {})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def test_no_credential_gets_401_with_a_basic_challenge(server: MonitorServer) -> None:
    response = get(server, "/metrics")
    assert response.status == 401
    assert response.getheader("WWW-Authenticate").startswith('Basic realm="pubsub-channels"')
    assert get(server, "/metrics", basic("owner", "wrong")).status == 401
    assert get(server, "/metrics", basic("owner", MONITOR_TOKEN)).status == 200
    assert get(server, "/api/channels", f"Bearer {MONITOR_TOKEN}").status == 200


def test_replies_carry_a_strict_content_security_policy(server: MonitorServer) -> None:
    response = get(server, "/", basic("owner", MONITOR_TOKEN))
    assert "script-src 'self'" in response.getheader("Content-Security-Policy")
    assert response.getheader("X-Content-Type-Options") == "nosniff"
    assert response.getheader("Server") == "pubsub-channels"


def test_a_request_head_past_the_cap_is_refused(server: MonitorServer) -> None:
    big = "x" * CONFIG.max_request_bytes
    response = get(server, "/api/channels", f"Bearer {MONITOR_TOKEN}{big}")
    assert response.status == 431


def test_a_body_is_refused(server: MonitorServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port(server), timeout=5)
    conn.request(
        "GET", "/api/channels", body=b"x" * 10, headers={"Authorization": f"Bearer {MONITOR_TOKEN}"}
    )
    assert conn.getresponse().status == 413
    conn.close()


def held_post(server: MonitorServer, auth: str = basic("owner", MONITOR_TOKEN)) -> socket.socket:
    """An authenticated POST whose body never comes: it holds a request thread (a slot)
    until the request timeout."""
    sock = socket.create_connection(("127.0.0.1", port(server)))
    sock.sendall(
        f"POST /api/replay HTTP/1.0\r\nAuthorization: {auth}\r\nContent-Length: 100\r\n"
        "\r\n".encode()
    )
    return sock


def test_connections_past_the_cap_get_503_until_a_slot_frees(capped: MonitorServer) -> None:
    server = capped
    # Given as many requests being served as the cap (each waits for its body until the timeout)
    held = [held_post(server) for _ in range(2)]
    try:
        # Then one more is answered 503 at once
        busy = wait_until(
            lambda: (r := get(server, "/", basic("owner", MONITOR_TOKEN))).status == 503 and r,
            what="a 503 while the slots are held",
        )
        assert busy.getheader("Retry-After") == "1"
        # And once the held ones time out, requests are served again
        started = time.monotonic()
        wait_until(
            lambda: get(server, "/", basic("owner", MONITOR_TOKEN)).status == 200,
            timeout_s=5 * CONFIG.request_timeout_s,
            what="a slot freed by the request timeout",
        )
        assert time.monotonic() - started < 4 * CONFIG.request_timeout_s
        for sock in held:  # the server closed them
            sock.settimeout(5)
            assert sock.recv(1) == b""
    finally:
        for sock in held:
            sock.close()


def test_silent_connections_hold_no_request_thread(capped: MonitorServer) -> None:
    """A slowloris: many times the cap of connections that send nothing, or the start of a
    head and no more. Requests are served meanwhile, none refused as busy."""
    server = capped
    silent = [socket.create_connection(("127.0.0.1", port(server))) for _ in range(20)]
    trickling = [socket.create_connection(("127.0.0.1", port(server))) for _ in range(20)]
    try:
        for sock in trickling:
            sock.sendall(b"GET / HTTP/1.0\r\nX-Slow: ")
        statuses = [get(server, "/", basic("owner", MONITOR_TOKEN)).status for _ in range(10)]
        assert statuses == [200] * 10
    finally:
        for sock in silent + trickling:
            sock.close()


def test_past_max_waiting_the_oldest_silent_connection_is_closed() -> None:
    config = dataclasses.replace(CONFIG, max_waiting=4, request_timeout_s=60.0)
    for server in serving(config):
        first = socket.create_connection(("127.0.0.1", port(server)))
        first.settimeout(10)
        others = [socket.create_connection(("127.0.0.1", port(server))) for _ in range(4)]
        try:
            assert first.recv(1) == b""  # closed to make room, long before its timeout
            assert get(server, "/", basic("owner", MONITOR_TOKEN)).status == 200
        finally:
            for sock in [first, *others]:
                sock.close()


def test_a_head_sent_in_pieces_is_read_whole() -> None:
    """The accept loop reads a head as it comes, and hands what it read (with any of the
    body that came along) to the request."""
    raw = io.BytesIO(b"rest of the body")
    head = _Prefixed(b"GET / HTTP/1.0\r\nA: b\r\n\r\nbody: ", raw)
    assert head.readline(65537) == b"GET / HTTP/1.0\r\n"
    assert head.readline(3) == b"A: "
    assert head.readline(65537) == b"b\r\n"
    assert head.readline(65537) == b"\r\n"
    assert head.read(10) == b"body: rest"
    assert head.read() == b" of the body"
    line = _Prefixed(b"GET / HT", io.BytesIO(b"TP/1.0\r\nnext"))
    assert line.readline(65537) == b"GET / HTTP/1.0\r\n"


def test_a_client_that_stops_mid_request_is_dropped(server: MonitorServer) -> None:
    sock = socket.create_connection(("127.0.0.1", port(server)))
    sock.settimeout(5 * CONFIG.request_timeout_s)
    started = time.monotonic()
    sock.sendall(b"GET / HTTP/1.0\r\nX-Half: ")
    assert sock.recv(1024) == b""  # closed by the server, without a reply
    assert time.monotonic() - started < 3 * CONFIG.request_timeout_s
    sock.close()


def test_a_request_head_is_read_only_until_its_deadline() -> None:
    # a client trickling bytes fast enough for every receive still meets the deadline
    raw = io.BytesIO(b"GET / HTTP/1.0\r\n" * 10)
    reader = _LimitedReader(raw, 10_000, deadline=time.monotonic() - 1)
    with pytest.raises(TimeoutError):
        reader.readline()
    capped = _LimitedReader(io.BytesIO(b"a" * 100 + b"\n"), 10, time.monotonic() + 60)
    assert capped.readline(65537) == b"a" * 10
    with pytest.raises(RequestTooLarge):
        capped.readline(65537)


def test_stop_closes_the_port_within_its_budget() -> None:
    monitor = MonitorServer(CONFIG, handle())
    monitor.start()
    address = ("127.0.0.1", port(monitor))
    started = time.monotonic()
    monitor.stop()
    assert time.monotonic() - started < 2.0
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=1).close()
    monitor.stop()  # twice is harmless


def connect(server: MonitorServer, context: ssl.SSLContext | None) -> http.client.HTTPConnection:
    if context is None:
        return http.client.HTTPConnection("127.0.0.1", port(server), timeout=5)
    return http.client.HTTPSConnection("127.0.0.1", port(server), timeout=5, context=context)


def post(
    server: MonitorServer,
    path: str,
    body: bytes,
    headers: dict[str, str],
    context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    conn = connect(server, context)
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def test_a_replay_post_needs_credentials_the_session_token_and_its_own_host(
    tmp_path: Path,
) -> None:
    """Over HTTPS, as a replay needs (over plain HTTP it is refused to everyone)."""
    ca = trustme.CA()
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued = ca.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    orders = FakeChannel("orders")
    # room for more than CONFIG's 2 requests at once: a finished request's thread may
    # still hold its slot when the next one arrives (that is the cap's test, not this)
    config = dataclasses.replace(CONFIG, max_connections=16, cert=str(cert), key=str(key))
    monitor = MonitorServer(config, handle(orders))
    monitor.start()
    try:
        owner = {"Authorization": basic("owner", MONITOR_TOKEN)}
        session = get_json(monitor, "/api/session", owner["Authorization"], context)
        path = "/api/channels/orders/dead-letters/replay"
        token = {"X-CSRF-Token": session["csrf"]}
        assert post(monitor, path, b"{}", token, context)[0] == 401  # no credential
        assert post(monitor, path, b"{}", owner, context)[0] == 403  # no token
        evil = {**owner, **token, "Origin": "https://evil.example"}
        assert post(monitor, path, b"{}", evil, context)[0] == 403
        status, reply = post(monitor, path, b'{"ids": ["PUB-3"]}', {**owner, **token}, context)
        assert (status, json.loads(reply)) == (200, {"replayed": 1})
        too_big = b'{"ids": ["' + b"x" * CONFIG.max_request_bytes + b'"]}'
        assert post(monitor, path, too_big, {**owner, **token}, context)[0] == 413
        assert orders.replayed == [["PUB-3"]]
    finally:
        monitor.stop()


def get_json(
    server: MonitorServer, path: str, auth: str, context: ssl.SSLContext | None = None
) -> dict:
    conn = connect(server, context)
    conn.request("GET", path, headers={"Authorization": auth})
    data = conn.getresponse().read()
    conn.close()
    return json.loads(data)


def test_with_the_brokers_certificate_the_monitor_speaks_https_only(tmp_path) -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    # a long request timeout: a stalled handshake would hold a thread for the whole test
    config = dataclasses.replace(
        CONFIG, cert=str(cert_path), key=str(key_path), request_timeout_s=30.0
    )
    monitor = MonitorServer(config, handle(FakeChannel("orders")))
    monitor.start()
    stalled: list[socket.socket] = []
    try:
        assert monitor.url.startswith("https://127.0.0.1:")
        # strangers stalled in their TLS handshakes hold no request thread
        stalled += [socket.create_connection(("127.0.0.1", port(monitor))) for _ in range(20)]
        for sock in stalled:
            sock.sendall(b"\x16\x03\x01")
        context = ssl.create_default_context()
        ca.configure_trust(context)
        conn = http.client.HTTPSConnection("127.0.0.1", port(monitor), context=context, timeout=5)
        conn.request("GET", "/api/channels", headers={"Authorization": f"Bearer {MONITOR_TOKEN}"})
        reply = conn.getresponse()
        assert reply.status == 200 and json.loads(reply.read())[0]["channel"] == "orders"
        conn.close()
        # a plain-HTTP client gets no page (the TLS handshake fails, in its request thread)
        with pytest.raises((http.client.HTTPException, OSError)):
            get(monitor, "/api/channels", f"Bearer {MONITOR_TOKEN}")
        # and an HTTPS client that does not trust the CA refuses the server
        strange = http.client.HTTPSConnection(
            "127.0.0.1", port(monitor), context=ssl.create_default_context(), timeout=5
        )
        with pytest.raises(ssl.SSLCertVerificationError):
            strange.request("GET", "/metrics")
        strange.close()
    finally:
        for sock in stalled:
            sock.close()
        monitor.stop()


def test_requests_one_after_another_are_never_refused_as_busy() -> None:
    """The thread of a request whose reply was read may still hold its slot when the
    client's next request arrives: that request waits for the slot instead of a 503."""
    for monitor in serving(dataclasses.replace(CONFIG, max_connections=1)):
        statuses = [get(monitor, "/", basic("owner", MONITOR_TOKEN)).status for _ in range(100)]
        assert set(statuses) == {200}


def test_one_user_holds_at_most_half_of_the_request_threads() -> None:
    """Alice's POSTs whose bodies never came held every request thread, so the owner's
    requests got 503s until they timed out (session 33's attacker probe, 5 of 5). Her
    POSTs are held for longer than the test takes: with the 1 s request timeout, a
    loaded machine let them time out before a poll saw her refused (a CI run)."""
    config = dataclasses.replace(CONFIG, max_connections=4, request_timeout_s=30.0)
    monitor = MonitorServer(config, handle())
    monitor.start()
    alice = basic("alice", "alice-pw")
    held = [held_post(monitor, alice) for _ in range(2)]
    try:
        refused = wait_until(
            lambda: (r := get(monitor, "/api/channels", alice)).status == 503 and r,
            what="alice refused past her share",
        )
        assert refused.getheader("Retry-After") == "1"
        assert get(monitor, "/api/channels", basic("owner", MONITOR_TOKEN)).status == 200
    finally:
        for sock in held:
            sock.close()
        monitor.stop()
