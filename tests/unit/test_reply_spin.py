"""A connection that waits for a quick reply awake where that pays: what its policy
learns from round trips, and that its reads still return what was sent, raise a timeout,
or see a closed peer, on real sockets."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator

import Pyro5.errors
import pytest
from Pyro5 import socketutil

from channel_client import reply_spin
from channel_client.remote import ClientOptions
from channel_client.reply_spin import (
    CALLER_SPIN_S,
    MIN_GAIN,
    PROBE_EVERY,
    SPIN_FACTOR,
    WINDOW,
    RoundTrips,
    SpinningConnection,
    SpinPolicy,
    spin_for_replies,
)
from channel_server.errors import InvalidArgument

MAX_S = 0.0005
PEER_WAIT_S = 30.0
QUICK_S = 0.0001


def trips(quick_s: float, typical_s: float | None = None) -> RoundTrips:
    return RoundTrips(quick_s, quick_s if typical_s is None else typical_s)


def budgets(policy: SpinPolicy, calls: int) -> list[float]:
    return [policy.budget() for _ in range(calls)]


def test_waiting_asleep_is_measured_first_then_awake_then_it_spins_for_quick_replies() -> None:
    policy = SpinPolicy(MAX_S)
    assert policy.budget() == 0.0
    policy.record(3 * QUICK_S, spun=False)
    assert policy.budget() == MAX_S
    policy.record(QUICK_S, spun=True)
    assert policy.budget() == pytest.approx(SPIN_FACTOR * QUICK_S)


def test_it_spins_while_waking_costs_more_than_the_gain_bound_and_probes_asleep() -> None:
    awake = trips(QUICK_S, 2 * QUICK_S)
    policy = SpinPolicy(MAX_S, awake, trips(QUICK_S * (1 + MIN_GAIN) * 1.1))
    spins = budgets(policy, 4 * PROBE_EVERY)
    assert spins.count(0.0) == 4  # one probe in PROBE_EVERY waits asleep
    assert [b for b in spins if b > 0] == [pytest.approx(SPIN_FACTOR * 2 * QUICK_S)] * (
        4 * PROBE_EVERY - 4
    )


def test_it_sleeps_where_waking_is_cheap_and_probes_awake_now_and_then() -> None:
    policy = SpinPolicy(MAX_S, trips(QUICK_S), trips(QUICK_S * 1.05))
    assert len([b for b in budgets(policy, 4 * PROBE_EVERY) if b > 0]) == 4
    for _ in range(WINDOW):
        policy.record(3 * QUICK_S, spun=False)  # waking got dear
    assert len([b for b in budgets(policy, PROBE_EVERY) if b > 0]) == PROBE_EVERY - 1


def test_replies_slower_than_the_bound_are_waited_for_asleep_without_probes() -> None:
    policy = SpinPolicy(MAX_S, trips(2 * MAX_S), trips(MAX_S, 10 * MAX_S))
    assert budgets(policy, 2 * PROBE_EVERY) == [0.0] * 2 * PROBE_EVERY
    off = SpinPolicy(0.0, trips(QUICK_S), trips(10 * QUICK_S))
    assert budgets(off, PROBE_EVERY) == [0.0] * PROBE_EVERY


def test_a_broker_pausing_now_and_then_does_not_decide() -> None:
    policy = SpinPolicy(MAX_S)
    for _ in range(WINDOW):
        policy.record(3 * QUICK_S, spun=False)
        policy.record(QUICK_S, spun=True)
    for _ in range(WINDOW // 2):
        policy.record(10 * MAX_S, spun=True)  # a store's write, a push: a few ms
    assert policy.awake == RoundTrips(QUICK_S, QUICK_S)
    assert policy.asleep == RoundTrips(3 * QUICK_S, 3 * QUICK_S)
    for _ in range(WINDOW // 2):
        policy.record(10 * MAX_S, spun=True)  # nearly all of the latest now
    assert policy.awake == RoundTrips(10 * MAX_S, 10 * MAX_S)
    assert policy.budget() == 0.0  # waiting awake no longer pays


@pytest.fixture
def pair() -> Iterator[tuple[SpinningConnection, socket.socket]]:
    """A spinning connection (the caller's side) and the socket answering it."""
    mine, theirs = socket.socketpair()
    mine.settimeout(PEER_WAIT_S)
    conn = socketutil.SocketConnection(mine)
    conn.__class__ = SpinningConnection
    conn.policy = SpinPolicy(MAX_S)
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
    conn.policy = SpinPolicy(PEER_WAIT_S)
    conn.policy.record(PEER_WAIT_S / 2, spun=False)  # what waiting asleep took: it spins
    for n in range(3):
        reply = bytes([n]) * 6 + b"x" * 34 + b"payload" * 100
        answering = answer(peer, reply)
        conn.send(b"request")
        got = conn.recv(6) + conn.recv(34) + conn.recv(len(reply) - 40)
        answering.join(PEER_WAIT_S)
        assert got == reply
    assert conn.policy.awake is not None and conn.policy.awake.quick_s > 0
    assert conn._poller is not None  # it spun


def test_a_connection_whose_replies_are_slow_does_not_spin(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, peer = pair
    conn.policy = SpinPolicy(MAX_S, trips(10 * MAX_S), trips(10 * MAX_S))
    answering = answer(peer, b"r" * 40)
    conn.send(b"request")
    assert conn.recv(40) == b"r" * 40
    answering.join(PEER_WAIT_S)
    assert conn._poller is None  # never polled: it blocked at once
    assert conn.policy.asleep is not None and conn.policy.asleep.typical_s < 10 * MAX_S


def test_one_thread_spins_at_a_time_the_others_wait_asleep(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, peer = pair
    conn.policy = SpinPolicy(PEER_WAIT_S)
    conn.policy.record(PEER_WAIT_S / 2, spun=False)  # it would spin
    with reply_spin._SPINNER:  # another thread spins
        answering = answer(peer, b"r" * 40)
        conn.send(b"request")
        assert conn.recv(40) == b"r" * 40
        answering.join(PEER_WAIT_S)
    assert conn._poller is None and conn.policy.awake is None  # it waited asleep


def test_a_read_without_a_request_before_it_does_not_spin(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, peer = pair
    peer.sendall(b"unasked")
    assert conn.recv(7) == b"unasked"
    assert conn._poller is None and conn.policy is not None and conn.policy.calls == 0


def test_a_reply_that_never_comes_still_times_out(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, _ = pair
    conn.policy = SpinPolicy(MAX_S, trips(QUICK_S), trips(3 * QUICK_S))
    conn.settimeout(0.05)
    conn.send(b"request")
    with pytest.raises(Pyro5.errors.TimeoutError):
        conn.recv(6)


def test_a_peer_that_closes_ends_the_spin_with_connection_closed(
    pair: tuple[SpinningConnection, socket.socket],
) -> None:
    conn, peer = pair
    conn.policy = SpinPolicy(PEER_WAIT_S, trips(QUICK_S), trips(3 * QUICK_S))
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
        assert type(plain) is SpinningConnection and plain.policy.max_s == MAX_S
        off = socketutil.SocketConnection(theirs)
        spin_for_replies(_HasConnection(off), 0.0)  # type: ignore[arg-type]
        assert type(off) is socketutil.SocketConnection
        spin_for_replies(_HasConnection(None), MAX_S)  # type: ignore[arg-type]  # not connected
    finally:
        mine.close()
        theirs.close()


def test_nothing_spins_where_there_is_no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(select, "poll")  # as on Windows
    mine, theirs = socket.socketpair()
    try:
        plain = socketutil.SocketConnection(mine)
        spin_for_replies(_HasConnection(plain), MAX_S)  # type: ignore[arg-type]
        assert type(plain) is socketutil.SocketConnection
    finally:
        mine.close()
        theirs.close()


@pytest.mark.parametrize("bad", [-0.001, 1.0, float("nan"), "0.5"])
def test_a_spin_bound_that_is_not_a_fraction_of_a_second_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="reply_spin_s"):
        ClientOptions("127.0.0.1", 9090, reply_spin_s=bad)  # type: ignore[arg-type]
    assert ClientOptions("127.0.0.1", 9090).reply_spin_s == CALLER_SPIN_S


@pytest.mark.parametrize(
    ("field", "overrides"),
    [
        ("timeout_s", {"timeout_s": -1}),
        ("timeout_s", {"timeout_s": "10"}),
        ("ns_port", {"ns_port": "9090"}),
        ("ns_port", {"ns_port": 0}),
        ("attempts", {"attempts": 0}),
    ],
)
def test_a_client_option_is_checked_as_the_client_is_made(field: str, overrides: dict) -> None:
    """A negative timeout or a port given as text was taken, and failed far from the
    mistake (session 34's newcomer)."""
    values = {"ns_host": "127.0.0.1", "ns_port": 9090} | overrides
    with pytest.raises(InvalidArgument) as refused:
        ClientOptions(**values)
    assert refused.value.argument == field
