"""Connections that stall: half a header, a handshake sent a byte at a time, silence after
the handshake. ``--handshake-timeout`` closes a connection that has not finished its
handshake in time (however it trickles), ``--comm-timeout`` one that has gone quiet.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import Pyro5.protocol as wire
import pytest

from channel_server.credentials import Credential
from tests.hostile.health import Bound, failures, record_attack, timed
from tests.hostile.procinfo import Sampler
from tests.hostile.rawwire import DAEMON_OBJECT, HEADER_BYTES, RawConnection, connect_payload, frame
from tests.hostile.services import Stack, owner, running_stack

pytestmark = pytest.mark.hostile
HANDSHAKE_TIMEOUT_S = 1.0
COMM_TIMEOUT_S = 3.0
"""Over the subscribers' heartbeat (2 s), so their own connections are never idle that
long."""
MARGIN_S = 3.0
"""How late after its timeout a stalled connection may still be closed."""
TRICKLE_EVERY_S = 0.25
SLOW_BOUND = Bound(
    threads=8, rss_mib=16, why="one stalled connection holds one worker at most, until closed"
)


@pytest.fixture(scope="module")
def stack(hostile_root) -> Iterator[Stack]:
    flags = (
        "--handshake-timeout",
        str(HANDSHAKE_TIMEOUT_S),
        "--comm-timeout",
        str(COMM_TIMEOUT_S),
    )
    with running_stack(hostile_root, "slow", "--memory", *flags) as s:
        yield s


def _connect_frame(credential: Credential | None, port: int = 0) -> bytes:
    """A connect message (to the daemon at ``port``: what a proof is made for)."""
    payload = connect_payload("msgpack", credential, DAEMON_OBJECT, port)
    return frame(wire.MSG_CONNECT, payload)


def _judge(stack: Stack, attack: str, sampler: Sampler, through, error, closed_s, limit_s):
    note = "never closed" if closed_s is None else f"closed after {closed_s:.1f} s"
    row = record_attack(attack, stack.broker, sampler, through, note=note)
    found = failures(row, SLOW_BOUND, error)
    if closed_s is None or closed_s > limit_s:
        found.append(f"{attack}: {note}, not within {limit_s:g} s")
    assert not found, "\n".join(found)


def _wait_closed(conn: RawConnection, started: float, limit_s: float) -> float | None:
    """Seconds from ``started`` until the broker closed the connection, or None if it
    was still open ``limit_s`` after ``started``."""
    left = max(0.1, started + limit_s - time.monotonic())
    return time.monotonic() - started if conn.closed_by_peer(left) else None


STALLED_OPENINGS = {
    "half a header, then silence": _connect_frame(None)[:10],
    "a whole header, then silence": _connect_frame(None)[:HEADER_BYTES],
    "nothing at all": b"",
}
QUIET_TAILS = {
    "silence": b"",
    "half a request header, then silence": frame(wire.MSG_INVOKE, b"")[:12],
}


@pytest.mark.parametrize("what", list(STALLED_OPENINGS))
def test_a_handshake_that_stalls_is_closed(stack: Stack, what: str) -> None:
    opening, limit = STALLED_OPENINGS[what], HANDSHAKE_TIMEOUT_S + MARGIN_S
    with Sampler(stack.broker.popen.pid) as sampler, RawConnection(stack.broker_address) as conn:
        started = time.monotonic()
        conn.send(opening)
        through, error = timed(stack.probe.round)
        closed_s = _wait_closed(conn, started, limit)
    _judge(stack, f"handshake: {what}", sampler, through, error, closed_s, limit)


def test_a_handshake_trickled_byte_by_byte_is_closed(stack: Stack) -> None:
    """Each byte arrives before any per-read timeout would fire: only a deadline on the
    whole handshake stops it."""
    limit = HANDSHAKE_TIMEOUT_S + MARGIN_S
    data = _connect_frame(owner().credential, stack.broker_address[1])
    with Sampler(stack.broker.popen.pid) as sampler, RawConnection(stack.broker_address) as conn:
        started, closed_s = time.monotonic(), None
        through, error = timed(stack.probe.round)
        for n in range(len(data)):
            try:
                conn.send(data[n : n + 1])
            except OSError:
                closed_s = time.monotonic() - started
                break
            if conn.closed_by_peer(TRICKLE_EVERY_S):  # the pace of the trickle
                closed_s = time.monotonic() - started
                break
            if time.monotonic() - started > limit:
                break
    _judge(stack, "handshake trickled byte by byte", sampler, through, error, closed_s, limit)


@pytest.mark.parametrize("what", list(QUIET_TAILS))
def test_a_quiet_connection_is_closed(stack: Stack, what: str) -> None:
    tail, limit = QUIET_TAILS[what], COMM_TIMEOUT_S + MARGIN_S
    with Sampler(stack.broker.popen.pid) as sampler, RawConnection(stack.broker_address) as conn:
        assert conn.connect(owner().credential).type == wire.MSG_CONNECTOK
        started = time.monotonic()
        conn.send(tail)
        through, error = timed(stack.probe.round)
        closed_s = _wait_closed(conn, started, limit)
    _judge(stack, f"after the handshake: {what}", sampler, through, error, closed_s, limit)
