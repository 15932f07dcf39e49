"""Raw bytes on the broker's socket: garbage, lying headers, oversized and compressed
frames, oneway calls, requests that do not decode.

What the broker must do: close a connection that does not speak Pyro5 or asks for what it
refuses (oneway, compressed, a frame over --max-message-bytes, announced in the header, so
it is never buffered); answer a request that does not decode with InvalidArgument. Through
all of it it stays up, small, and serves a normal client.
"""

from __future__ import annotations

import contextlib
import zlib

import msgpack
import Pyro5.errors
import Pyro5.protocol as wire
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.hostile import tally
from tests.hostile.caller import classify_reply
from tests.hostile.health import Bound, close_row, failures
from tests.hostile.procinfo import MIB, Sampler
from tests.hostile.rawwire import DAEMON_OBJECT, RawConnection, frame
from tests.hostile.services import Service, owner
from tests.hostile.tally import Outcome, Tally

pytestmark = pytest.mark.hostile
DEFAULT_MAX_MESSAGE_BYTES = 64 * MIB
"""The broker's default --max-message-bytes."""
STREAM_BYTES = 32 * MIB
"""How much of a frame's announced body an attack actually sends."""
CHUNK = 1 * MIB
BOMB_BYTES = 128 * MIB
"""What the compressed request inflates to (it is ~128 KiB on the wire)."""
CLOSE_WITHIN_S = 5.0
STALL_S = 1.0
"""A peer that takes none of our bytes for this long is not reading them."""
RAW_BOUND = Bound(
    threads=8,
    rss_mib=16,
    why="one attacking connection at a time holds at most one worker; nothing of a "
    "refused frame may be kept, and a frame over the limit must not be buffered (the "
    "attack sends 32 MiB of it or inflates to 128 MiB)",
)


def _address(service: Service) -> tuple[str, int]:
    return service.stack.broker_address


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def _admitted(address: tuple[str, int]) -> RawConnection:
    conn = RawConnection(address)
    answer = conn.connect(owner().credential)
    assert answer.type == wire.MSG_CONNECTOK, "the owner was not let in"
    return conn


def _closed(conn: RawConnection, results: Tally, site: str) -> bool:
    closed = conn.closed_by_peer(CLOSE_WITHIN_S)
    kind = tally.OK if closed else tally.TIMEOUT
    results.add(site, Outcome(kind, "", f"still open after {CLOSE_WITHIN_S:g} s"), site)
    return closed


def _judge(
    attack: str,
    service: Service,
    sampler: Sampler,
    results: Tally,
    extra: list[str] | None = None,
    note: str = "",
) -> None:
    """Record the attack's row (a normal client's round after it) and fail on any
    problem: a wrong outcome, death, growth past RAW_BOUND, a client kept out."""
    stack = service.stack
    row, round_error = close_row(attack, stack.broker, sampler, results, stack.probe.round, note)
    found = results.problems() + (extra or []) + failures(row, RAW_BOUND, round_error)
    assert not found, "\n".join(found)


def _stream(conn: RawConnection, total: int) -> int:
    """Send up to ``total`` zero bytes; returns how many went before the peer stopped
    taking them (closed, reset, or not reading for the socket's timeout)."""
    sent, block = 0, bytes(CHUNK)
    try:
        while sent < total:
            conn.sock.sendall(block)
            sent += CHUNK
    except OSError:  # TimeoutError included: a peer that does not read is not buffering
        pass
    return sent


def test_garbage_bytes_get_the_connection_closed(service: Service, calls_budget: int) -> None:
    address, results = _address(service), Tally()
    garbage = st.binary(min_size=6, max_size=4096).filter(lambda b: not b.startswith(b"PYRO"))

    @_settings(max(10, calls_budget // 20))
    @given(data=garbage)
    def one(data: bytes) -> None:
        with RawConnection(address) as conn:
            with contextlib.suppress(OSError):  # closed while we still wrote: refused too
                conn.send(data)
            _closed(conn, results, "raw.garbage")

    with Sampler(service.stack.broker.popen.pid) as sampler:
        one()
    _judge("garbage bytes", service, sampler, results)


ANNOUNCED = {"64MiB+1": DEFAULT_MAX_MESSAGE_BYTES + 1, "1GiB": 1 << 30, "4GiB": (1 << 32) - 1}


@pytest.mark.parametrize("phase", ["before the handshake", "after the handshake"])
@pytest.mark.parametrize("size", list(ANNOUNCED))
def test_a_frame_over_the_size_limit_is_refused_unread(
    service: Service, phase: str, size: str
) -> None:
    """The header says how big the frame is: one over the limit is refused right there
    (the connection closed), not read into memory first."""
    address, results, announced = _address(service), Tally(), ANNOUNCED[size]
    msgtype = wire.MSG_CONNECT if phase.startswith("before") else wire.MSG_INVOKE
    with Sampler(service.stack.broker.popen.pid) as sampler:
        conn = RawConnection(address) if msgtype == wire.MSG_CONNECT else _admitted(address)
        with conn:
            conn.send(frame(msgtype, b"", announced=announced))
            conn.sock.settimeout(STALL_S)
            sent = _stream(conn, STREAM_BYTES)
            _closed(conn, results, f"raw.announce {announced}")
    note = f"{sent // MIB} MiB of the body went in before the broker stopped reading"
    _judge(f"{size} frame {phase}", service, sampler, results, note=note)


def test_a_compressed_request_is_refused_uninflated(service: Service) -> None:
    """FLAGS_COMPRESSED makes Pyro5 inflate the body before looking at it: a 128 KiB
    zlib bomb would become 128 MiB. The broker closes the connection instead."""
    address, results = _address(service), Tally()
    bomb = zlib.compress(bytes(BOMB_BYTES), 9)
    with Sampler(service.stack.broker.popen.pid) as sampler, _admitted(address) as conn:
        conn.send(frame(wire.MSG_INVOKE, bomb, flags=wire.FLAGS_COMPRESSED))
        _closed(conn, results, "raw.compressed")
    _judge("zlib bomb (FLAGS_COMPRESSED)", service, sampler, results)


def test_a_oneway_request_is_refused(service: Service) -> None:
    """FLAGS_ONEWAY makes Pyro5 run the call on a new thread of its own, unbounded: the
    broker closes the connection instead of starting one."""
    address, results = _address(service), Tally()
    payload = msgpack.packb((DAEMON_OBJECT, "ping", [], {}))
    with Sampler(service.stack.broker.popen.pid) as sampler, _admitted(address) as conn:
        conn.send(frame(wire.MSG_INVOKE, payload, flags=wire.FLAGS_ONEWAY))
        _closed(conn, results, "raw.oneway")
    _judge("one oneway request", service, sampler, results)


def _call_bytes(args_bytes: bytes = b"\x90", kwargs_bytes: bytes = b"\x80") -> bytes:
    """A msgpack call of Pyro.Daemon.ping with hand-made argument bytes."""
    head = b"\x94" + msgpack.packb(DAEMON_OBJECT) + msgpack.packb("ping")
    return head + args_bytes + kwargs_bytes


UNDECODABLE = {
    "a byte msgpack never uses": b"\xc1",
    "a truncated message": msgpack.packb((DAEMON_OBJECT, "ping", ["x" * 20], {}))[:-3],
    "bytes after the message": msgpack.packb((DAEMON_OBJECT, "ping", [], {})) + b"\x00",
    "not a 4-tuple": msgpack.packb([1, 2, 3]),
    "a string that is not UTF-8 (a lone surrogate)": _call_bytes(b"\x91\xa3\xed\xb2\x80"),
    "an integer map key": _call_bytes(b"\x91" + msgpack.packb({1: "x"})),
    "an integer keyword name": _call_bytes(kwargs_bytes=msgpack.packb({7: "x"})),
    "a class Pyro5 does not know": _call_bytes(b"\x91" + msgpack.packb({"__class__": "no.Such"})),
    "an exception without its args": _call_bytes(
        b"\x91" + msgpack.packb({"__class__": "Pyro5.errors.PyroError"})
    ),
    "lists nested 100,000 deep": _call_bytes(b"\x91" * 100_000 + b"\xc0"),
    "an array announcing 4 billion items": _call_bytes(b"\xdd\xff\xff\xff\xff"),
}


def test_requests_that_do_not_decode_are_invalid_arguments(service: Service) -> None:
    address, results = _address(service), Tally()
    wrong = {}
    with Sampler(service.stack.broker.popen.pid) as sampler:
        for what, payload in UNDECODABLE.items():
            outcome = _send_request(address, payload)
            results.add("raw.undecodable", outcome, what)
            if outcome.label != f"{tally.REFUSED}:InvalidArgument":
                wrong[what] = f"{outcome.label} {outcome.message}"
    extra = [f"{what}: {got}" for what, got in wrong.items()]
    _judge("requests that do not decode", service, sampler, results, extra)


def test_random_request_bodies_get_typed_refusals(service: Service, calls_budget: int) -> None:
    address, results = _address(service), Tally()

    @_settings(max(10, calls_budget // 10))
    @given(payload=st.binary(max_size=512))
    def one(payload: bytes) -> None:
        results.add("raw.random body", _send_request(address, payload), repr(payload))

    with Sampler(service.stack.broker.popen.pid) as sampler:
        one()
    _judge("random request bodies", service, sampler, results)


def _send_request(address: tuple[str, int], payload: bytes) -> Outcome:
    """One request with this body on a new owner connection: what came back."""
    with _admitted(address) as conn:
        conn.send(frame(wire.MSG_INVOKE, payload))
        try:
            return classify_reply(conn.receive())
        except Pyro5.errors.ConnectionClosedError as exc:
            return Outcome(tally.DROPPED, "", str(exc))
        except TimeoutError as exc:
            return Outcome(tally.TIMEOUT, "", str(exc))


WRONG_OPENINGS = {
    "serializer id 0": frame(wire.MSG_CONNECT, b"\x80", serializer_id=0),
    "serializer id 99": frame(wire.MSG_CONNECT, b"\x80", serializer_id=99),
    "a request before the handshake": frame(
        wire.MSG_INVOKE, msgpack.packb((DAEMON_OBJECT, "ping", [], {}))
    ),
    "a ping before the handshake": frame(wire.MSG_PING, b"ping"),
    "a handshake that does not decode": frame(wire.MSG_CONNECT, b"\xc1"),
    "a handshake that is not a map": frame(wire.MSG_CONNECT, msgpack.packb([1, 2])),
    "a wrong protocol version": b"PYRO\x00\x01" + bytes(34),
    "a wrong magic number": frame(wire.MSG_CONNECT, b"\x80")[:38] + b"\x00\x00",
}


def test_wrong_openings_get_the_connection_closed(service: Service) -> None:
    """Whatever else a connection opens with, it is refused (a reply saying why is
    fine) and closed."""
    address, results = _address(service), Tally()
    with Sampler(service.stack.broker.popen.pid) as sampler:
        for what, data in WRONG_OPENINGS.items():
            with RawConnection(address) as conn:
                conn.send(data)
                _closed(conn, results, f"raw.opening: {what}")
    _judge("wrong openings", service, sampler, results)
