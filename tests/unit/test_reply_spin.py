"""A connection that waits for a quick reply awake: how long it spins, and that its reads
still return what was sent, raise a timeout, or see a closed peer, on real sockets."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import Pyro5.errors
import pytest
from Pyro5 import socketutil

from channel_client.reply_spin import (
    SPIN_FACTOR,
    SpinningConnection,
    smoothed,
    spin_budget,
    spin_for_replies,
)

MAX_S = 0.0005
PEER_WAIT_S = 30.0


def test_the_first_reply_may_take_the_whole_spin() -> None:
    assert spin_budget(None, MAX_S) == MAX_S


def test_quick_replies_are_waited_for_a_few_times_their_round_trip() -> None:
    assert spin_budget(0.0001, MAX_S) == pytest.approx(SPIN_FACTOR * 0.0001)
    assert spin_budget(0.0004, MAX_S) == MAX_S  # never past the caller's bound


def test_replies_slower_than_the_bound_are_waited_for_asleep() -> None:
    assert spin_budget(MAX_S, MAX_S) == 0.0
    assert spin_budget(0.002, MAX_S) == 0.0
    assert spin_budget(None, 0.0) == 0.0  # spinning off


def test_the_round_trip_is_smoothed_toward_the_latest() -> None:
    assert smoothed(None, 0.003) == 0.003
    assert 0.001 < smoothed(0.001, 0.003) < 0.003
    assert smoothed(0.001, 0.001) == 0.001


@pytest.fixture
def pair() -> Iterator[tuple[SpinningConnection, socket.socket]]:
    """A spinning connection (the caller's side) and the socket answering it."""
    mine, theirs = socket.socketpair()
    mine.settimeout(PEER_WAIT_S)
    conn = socketutil.SocketConnection(mine)
    conn.__class__ = SpinningConnection
    conn.max_s = MAX_S
    try:
        yield conn, theirs
    finally:
        conn.close()
        theirs.close()


def answer(peer: socket.socket, reply: bytes) -> threading.Thread:
    """Read a request on ``peer`` and send ``reply``, from a thread of its own."""

    def run() -> None:
        peer.recv(1024)
        peer.sendall(reply)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_reply_is_read_whole_in_the_pieces_pyro5_asks_for(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, peer = pair
    conn.max_s = PEER_WAIT_S  # its first read spins until the reply is there
    for n in range(3):
        reply = bytes([n]) * 6 + b"x" * 34 + b"payload" * 100
        answering = answer(peer, reply)
        conn.send(b"request")
        got = conn.recv(6) + conn.recv(34) + conn.recv(len(reply) - 40)
        answering.join(PEER_WAIT_S)
        assert got == reply
    assert conn._round_trip_s is not None and conn._round_trip_s > 0
    assert conn._poller is not None  # it spun


def test_a_connection_whose_replies_are_slow_does_not_spin(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, peer = pair
    conn._round_trip_s = 10 * MAX_S
    answering = answer(peer, b"r" * 40)
    conn.send(b"request")
    assert conn.recv(40) == b"r" * 40
    answering.join(PEER_WAIT_S)
    assert conn._poller is None  # never polled: it blocked at once


def test_a_read_without_a_request_before_it_does_not_spin(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, peer = pair
    peer.sendall(b"unasked")
    assert conn.recv(7) == b"unasked"
    assert conn._poller is None and conn._round_trip_s is None


def test_a_reply_that_never_comes_still_times_out(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, _ = pair
    conn.settimeout(0.05)
    conn.send(b"request")
    with pytest.raises(Pyro5.errors.TimeoutError):
        conn.recv(6)


def test_a_peer_that_closes_ends_the_spin_with_connection_closed(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, peer = pair
    conn.send(b"request")
    peer.close()
    with pytest.raises(Pyro5.errors.ConnectionClosedError):
        conn.recv(6)


class _HasConnection:
    def __init__(self, conn: object) -> None:
        self._pyroConnection = conn


def test_only_a_plain_pyro5_connection_is_made_to_spin() -> None:
    mine, theirs = socket.socketpair()
    try:
        plain = socketutil.SocketConnection(mine)
        spin_for_replies(_HasConnection(plain), MAX_S)  # type: ignore[arg-type]
        assert type(plain) is SpinningConnection and plain.max_s == MAX_S
        off = socketutil.SocketConnection(theirs)
        spin_for_replies(_HasConnection(off), 0.0)  # type: ignore[arg-type]
        assert type(off) is socketutil.SocketConnection
        spin_for_replies(_HasConnection(None), MAX_S)  # type: ignore[arg-type]  # not connected
    finally:
        mine.close()
        theirs.close()
