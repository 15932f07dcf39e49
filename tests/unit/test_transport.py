"""Frame checks, the checked connection and strict call decoding (issue 13), without a
daemon: frames are built with Pyro5's own SendingMessage and read over a socketpair."""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import msgpack
import Pyro5
import pytest
import trustme
from Pyro5 import protocol
from Pyro5.serializers import MarshalSerializer, SerpentSerializer
from Pyro5.socketutil import SocketConnection

from channel_server import transport
from channel_server.errors import InvalidArgument, NotAuthorized
from channel_server.frames import (
    CALL_KINDS,
    HANDSHAKE_KINDS,
    HANDSHAKE_MAX_BYTES,
    HEADER_BYTES,
    HEADER_FORMAT,
    MAGIC,
    MSGPACK_ID,
    CheckedConnection,
    FrameRefused,
    read_header,
)
from channel_server.strict_calls import StrictMsgpack, checked_arity, serving
from channel_server.tls_sockets import PLAIN_REFUSED, PyroTlsSocket
from channel_server.transport import FILES_RESERVED, LobbyServer, TransportConfig, _Waiting
from channel_server.unpacking import MAX_CONTAINERS
from channel_server.waiting_room import WaitingRoom
from tests.integration.procs import wait_until

LIMIT = 1 << 20


def frame(
    kind: int = protocol.MSG_INVOKE,
    data: bytes = b"x",
    serializer: int = MSGPACK_ID,
    flags: int = 0,
    seq: int = 7,
) -> bytes:
    return protocol.SendingMessage(kind, flags, seq, serializer, data).data


def header(
    kind: int = protocol.MSG_INVOKE,
    data: bytes = b"x",
    serializer: int = MSGPACK_ID,
    flags: int = 0,
    seq: int = 7,
) -> bytes:
    """A header as a client of any kind may write it (SendingMessage drops some flags)."""
    return struct.pack(
        HEADER_FORMAT,
        b"PYRO",
        protocol.PROTOCOL_VERSION,
        kind,
        serializer,
        flags,
        seq,
        len(data),
        0,
        b"\0" * 16,
        0,
        MAGIC,
    )


def test_a_msgpack_call_is_served() -> None:
    got = read_header(header(data=b"abc"), CALL_KINDS, LIMIT)
    assert (got.kind, got.seq, got.size) == (protocol.MSG_INVOKE, 7, 3)


@pytest.mark.parametrize(
    "kw, reason",
    [
        ({"serializer": SerpentSerializer.serializer_id}, "msgpack only"),
        ({"serializer": MarshalSerializer.serializer_id}, "msgpack only"),
        ({"flags": protocol.FLAGS_ONEWAY}, "oneway"),
        ({"flags": protocol.FLAGS_BATCH}, "batched"),
        ({"flags": protocol.FLAGS_COMPRESSED}, "compressed"),
        ({"kind": protocol.MSG_CONNECT}, "not expected"),
        ({"kind": protocol.MSG_RESULT}, "not expected"),
        ({"data": b"x" * (LIMIT + 1)}, "over the limit"),
    ],
)
def test_a_frame_not_served_is_refused_with_its_reason(kw: dict, reason: str) -> None:
    with pytest.raises(FrameRefused, match=reason) as caught:
        read_header(header(**kw), CALL_KINDS, LIMIT)
    assert caught.value.frame is not None and caught.value.frame.seq == 7


def test_a_handshake_is_small_and_msgpack() -> None:
    assert read_header(header(kind=protocol.MSG_CONNECT), HANDSHAKE_KINDS, LIMIT).seq == 7
    big = header(kind=protocol.MSG_CONNECT, data=b"x" * (HANDSHAKE_MAX_BYTES + 1))
    with pytest.raises(FrameRefused, match="over the limit"):
        read_header(big, HANDSHAKE_KINDS, LIMIT)
    with pytest.raises(FrameRefused, match="not expected"):
        read_header(header(), HANDSHAKE_KINDS, LIMIT)


def test_pings_of_any_serializer_id_are_served() -> None:
    ping = header(kind=protocol.MSG_PING, serializer=42, data=b"ping")
    assert read_header(ping, CALL_KINDS, LIMIT).kind == protocol.MSG_PING


def test_garbage_is_not_a_frame() -> None:
    with pytest.raises(FrameRefused, match="not a Pyro5 frame") as caught:
        read_header(b"GET / HTTP/1.1\r\n" + b"\0" * (HEADER_BYTES - 16), CALL_KINDS, LIMIT)
    assert caught.value.frame is None


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.settimeout(2.0)
    yield a, b
    a.close()
    b.close()


def test_frames_are_read_whole_from_the_prefix_then_the_socket(pair) -> None:
    ours, theirs = pair
    hello, call = frame(kind=protocol.MSG_CONNECT, data=b"hi"), frame(data=b"body" * 1000)
    conn = CheckedConnection(ours, hello + call[:10], LIMIT)
    theirs.sendall(call[10:])
    assert bytes(protocol.recv_stub(conn, HANDSHAKE_KINDS).data) == b"hi"
    conn.handshaken = True
    assert bytes(protocol.recv_stub(conn, CALL_KINDS).data) == b"body" * 1000
    conn.keep_open = True  # the fixture closes the socket


def test_a_refused_header_is_refused_before_its_body_is_awaited(pair) -> None:
    ours, theirs = pair
    conn = CheckedConnection(ours, b"", LIMIT)
    conn.handshaken = True
    theirs.sendall(header(data=b"x" * (LIMIT + 1)))  # the body never comes
    with pytest.raises(FrameRefused, match="over the limit"):
        protocol.recv_stub(conn, CALL_KINDS)
    conn.keep_open = True


def test_before_the_handshake_only_a_handshake_is_served(pair) -> None:
    ours, _ = pair
    conn = CheckedConnection(ours, frame(), LIMIT)
    with pytest.raises(FrameRefused, match="not expected"):
        protocol.recv_stub(conn, HANDSHAKE_KINDS)
    conn.keep_open = True


def call_bytes(*call) -> bytes:
    return msgpack.packb(list(call), use_bin_type=True)


STRICT = StrictMsgpack()


def test_a_well_formed_call_decodes() -> None:
    assert STRICT.loadsCall(call_bytes("obj", "stats", [1], {"a": 2})) == (
        "obj",
        "stats",
        [1],
        {"a": 2},
    )


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\xc1\xc1garbage", "not a msgpack call"),
        (msgpack.packb(["o", "m", [{1: "int key"}], {}]), "not a msgpack call"),
        (call_bytes("o", "m", []), r"\[object, method, args, kwargs\]"),
        (call_bytes("o", 5, [], {}), "must be strings"),
        (call_bytes("o", "m", {}, []), "args must be a list"),
    ],
)
def test_a_malformed_call_is_a_typed_refusal(data: bytes, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason):
        STRICT.loadsCall(data)


def test_a_call_of_more_arrays_and_maps_than_the_bound_is_refused_before_it_is_built() -> None:
    """Empty arrays and maps are a byte each on the wire and about 60 decoded: the bound
    keeps a call from taking gigabytes before it can be refused."""
    one_big = call_bytes("o", "m", [[[]] * (MAX_CONTAINERS + 1)], {})
    many = call_bytes("o", "m", [[[{}] * 1000 for _ in range(MAX_CONTAINERS // 1000 + 1)]], {})
    for data in (one_big, many):
        with pytest.raises(InvalidArgument, match="not a msgpack call"):
            STRICT.loadsCall(data)
    at_the_bound = [[[]] * 1000 for _ in range(MAX_CONTAINERS // 1000 - 3)]
    assert STRICT.loadsCall(call_bytes("o", "m", [at_the_bound], {}))[2] == [at_the_bound]


def test_no_classes_or_extension_types_are_rebuilt() -> None:
    uri_dict = {"__class__": "Pyro5.core.URI", "state": ["PYRO", "x", None, "h", 1]}
    ext = msgpack.ExtType(0x32, b"\0" * 8)  # Pyro5 would make a datetime of it
    _, _, args, _ = STRICT.loadsCall(msgpack.packb(["o", "m", [uri_dict, ext], {}]))
    assert args == [uri_dict, ext]


class _Served:
    def __init__(self) -> None:
        self.objectsById = {"chan": _Target()}


@checked_arity
class _Target:
    def call(self, a: int, b: int = 0) -> int:
        return a + b

    def broken(self) -> None:
        raise TypeError("a bug inside")

    def hidden(self) -> None:
        pass

    call._pyroExposed = True  # type: ignore[attr-defined]
    broken._pyroExposed = True  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "target, method, reason",
    [
        ("nobody", "call", "no object 'nobody'"),
        ("chan", "hidden", "has no method 'hidden'"),
        ("chan", "_private", "has no method"),
        ("chan", "__getattr__", "has no method"),
        ("chan", "missing", "has no method"),
    ],
)
def test_a_call_names_a_served_object_and_an_exposed_method(target, method, reason) -> None:
    serving(_Served())
    try:
        with pytest.raises(InvalidArgument, match=reason):
            STRICT.loadsCall(call_bytes(target, method, [], {}))
        assert STRICT.loadsCall(call_bytes("chan", "call", [1], {}))[1] == "call"
    finally:
        serving(None)


@pytest.mark.parametrize("served", ["EventChannel", "BrokerService"])
def test_served_objects_expose_no_properties(served: str) -> None:
    """A property read is refused (above: ``__getattr__`` has no method), so a served
    object must list none in its metadata, or a proxy offers an attribute it cannot read
    (``proxy.name`` failed so, session 32)."""
    from channel_server.broker_service import BrokerService
    from channel_server.channel import EventChannel

    cls = {"EventChannel": EventChannel, "BrokerService": BrokerService}[served]
    assert Pyro5.server._get_exposed_members(cls)["attrs"] == set()


def test_wrong_arguments_are_a_typed_refusal_and_bugs_stay_bugs() -> None:
    target = _Target()
    assert target.call(1, b=2) == 3
    for args, kwargs in (((), {}), ((1, 2, 3), {}), ((1,), {"c": 3})):
        with pytest.raises(InvalidArgument, match="call"):
            target.call(*args, **kwargs)
    with pytest.raises(TypeError, match="a bug inside"):
        target.broken()
    assert target.call._pyroExposed  # still reachable over RPC


def test_the_lobby_skips_a_socket_dropped_since_its_select() -> None:
    """An accept that evicts the oldest waiting socket (past --max-waiting), or a shutdown,
    may drop a socket the same select() reported readable. Reading it then raised
    KeyError in the lobby's loop thread, which died: the daemon accepted nothing more."""
    lobby = LobbyServer.__new__(LobbyServer)  # only its lobby: no socket, pool or daemon
    lobby.sock, lobby.pool, lobby.housekeeper = None, None, None
    lobby._room = WaitingRoom(selectors.DefaultSelector(), "daemon")
    left, right = socket.socketpair()
    try:
        right.sendall(b"PYRO")  # readable, as the select said
        lobby._read(left)  # no longer waiting: nothing to do
        assert len(lobby._room) == 0
    finally:
        left.close()
        right.close()


# -- the lobby of a TLS daemon: a real TLS listening socket, its loop turned by the test --------
@pytest.fixture(scope="module")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_lobby(tls_ca: trustme.CA, monkeypatch: pytest.MonkeyPatch) -> Iterator[LobbyServer]:
    """A lobby as a TLS daemon has it (no worker pool: what is tested here stays in the
    lobby). Its select waits at most POLL_S, so a lobby with nothing to do turns a few
    times in a tenth of a second, and one that spins, thousands of times."""
    monkeypatch.setattr(transport, "_config", transport.TransportConfig())
    monkeypatch.setattr(Pyro5.config, "POLLTIMEOUT", POLL_S)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("127.0.0.1").configure_cert(context)
    context.sslsocket_class = PyroTlsSocket
    listener = context.wrap_socket(socket.create_server(("127.0.0.1", 0)), server_side=True)
    lobby = LobbyServer()  # no daemon, pool or housekeeper: only its lobby and loop's turns
    lobby.sock = listener
    lobby._selector.register(listener, selectors.EVENT_READ, lobby)
    try:
        yield lobby
    finally:
        lobby._room.drop_all()
        lobby._selector.close()
        listener.close()
        lobby._waker.close()
        lobby.sock = None


POLL_S = 0.02


def turn(lobby: LobbyServer) -> None:
    lobby.events([lobby.sock])


def turns_within(lobby: LobbyServer, seconds: float) -> int:
    turns, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        turn(lobby)
        turns += 1
    return turns


def accepted(lobby: LobbyServer) -> tuple[socket.socket, _Waiting]:
    """The lobby's one waiting connection, once its loop has accepted it."""

    def one() -> bool:
        turn(lobby)
        return len(lobby._room.snapshot()) == 1

    wait_until(one, timeout_s=5, what="the lobby to accept the connection")
    return next(iter(lobby._room.snapshot().items()))


HELLO = frame(kind=protocol.MSG_CONNECT, data=msgpack.packb({"handshake": "hi"}))


@pytest.mark.parametrize("sent", [1, 2, len(b"PYRO"), 10, HEADER_BYTES + 1])
def test_a_plain_client_that_stops_midway_does_not_spin_a_tls_lobby(
    tls_lobby: LobbyServer, sent: int
) -> None:
    """The TLS lobby peeked at a plain Pyro client's first bytes, waiting for its whole
    handshake to tell it TLS is required: bytes left unread keep a socket readable, so a
    client that sent part of one and stopped had the lobby's loop spin at full CPU (holding
    the GIL against the daemon's workers) until its handshake deadline."""
    with socket.create_connection(tls_lobby.sock.getsockname()) as client:
        client.sendall(HELLO[:sent])
        sock, waiting = accepted(tls_lobby)
        turns = turns_within(tls_lobby, 0.2)
        assert turns < 0.2 / POLL_S * 3, f"the lobby turned {turns} times in 0.2 s: it spins"
        assert tls_lobby._room.snapshot() == {sock: waiting}  # still waiting, until its deadline
        assert not waiting.draining


def test_a_plain_client_whose_handshake_comes_in_pieces_is_told_tls_is_required(
    tls_lobby: LobbyServer,
) -> None:
    with socket.create_connection(tls_lobby.sock.getsockname()) as client:
        client.sendall(HELLO[:10])
        sock, _ = accepted(tls_lobby)
        turns_within(tls_lobby, 0.05)
        client.sendall(HELLO[10:])

        def refused() -> bool:
            turn(tls_lobby)
            return sock not in tls_lobby._room.snapshot()

        wait_until(refused, timeout_s=5, what="the lobby to refuse the plain client")
        client.settimeout(5)
        reply = protocol.recv_stub(SocketConnection(client), [protocol.MSG_CONNECTFAIL])
    assert reply.seq == 7
    assert msgpack.unpackb(reply.data) == str(NotAuthorized(PLAIN_REFUSED))


def test_a_tls_client_hello_in_pieces_is_not_refused(
    tls_lobby: LobbyServer, tls_ca: trustme.CA
) -> None:
    """The first bytes of a TLS handshake are no plain Pyro: the lobby takes the handshake
    a step at a time as its pieces arrive, and the connection then waits for its Pyro one."""
    context = ssl.create_default_context()
    tls_ca.configure_trust(context)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    with socket.create_connection(tls_lobby.sock.getsockname()) as client:
        client.sendall(hello[:3])
        sock, waiting = accepted(tls_lobby)
        turns_within(tls_lobby, 0.05)
        assert tls_lobby._room.snapshot() == {sock: waiting} and not waiting.draining
        client.sendall(hello[3:])
        client.setblocking(False)

        def handshaken() -> bool:
            turn(tls_lobby)
            with contextlib.suppress(BlockingIOError):
                incoming.write(client.recv(65536))
            with contextlib.suppress(ssl.SSLWantReadError):
                tls.do_handshake()
            client.sendall(outgoing.read())
            return not getattr(sock, "handshake_pending", True)

        wait_until(handshaken, timeout_s=5, what="the TLS handshake")
        assert tls_lobby._room.snapshot() == {sock: waiting} and not waiting.draining


def test_connections_waiting_for_a_handshake_leave_the_process_its_own_files() -> None:
    """Strangers' sockets must not take the descriptors the store and the pushes need: an
    attacker's 1,100 idle sockets made a broker under `ulimit -n 1024` fail its journal
    writes ("Too many open files")."""
    config = TransportConfig()
    assert config.fitted(1 << 20) is config
    squeezed = config.fitted(1024)
    assert squeezed.max_waiting + config.max_connections + FILES_RESERVED == 1024


def test_a_process_raises_its_soft_open_files_limit_to_hold_its_bounds() -> None:
    code = (
        "import resource; from channel_server.transport import TransportConfig, current; "
        "TransportConfig().apply(); "
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], current().max_waiting)"
    )
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=low_soft_limit,
        check=True,
    ).stdout.split()
    wanted = TransportConfig().max_waiting + TransportConfig().max_connections + FILES_RESERVED
    if hard == resource.RLIM_INFINITY or hard >= wanted:
        assert out == [str(wanted), str(TransportConfig().max_waiting)]
    else:  # a hard limit below: fewer wait for a handshake instead
        assert out == [str(hard), str(hard - TransportConfig().max_connections - FILES_RESERVED)]
