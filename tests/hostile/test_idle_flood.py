"""Sockets that connect and say nothing, twice as many as the server serves at once.

Pyro5 gives each connection a worker for its whole life, handshake included, so 256 silent
sockets used to lock every client out of the broker and its name server (the issue). With
``--max-connections 16``, 32 silent sockets must leave a normal client's round (list,
subscribe, publish, receive) within 5 s, on the broker, on its embedded name server and on
a standalone one.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.hostile.health import Bound, failures, record_attack, timed
from tests.hostile.normal import name_server_round
from tests.hostile.procinfo import Sampler
from tests.hostile.services import Stack, running_stack
from tests.integration.procs import Proc, free_port

pytestmark = pytest.mark.hostile
MAX_CONNECTIONS = 16
LIMITS = ("--max-connections", str(MAX_CONNECTIONS))
IDLE_SOCKETS = 2 * MAX_CONNECTIONS
CONNECT_TIMEOUT_S = 2.0
IDLE_BOUND = Bound(
    threads=MAX_CONNECTIONS + 8,
    rss_mib=32,
    why=f"at most --max-connections ({MAX_CONNECTIONS}) workers, whoever connects, and 8 "
    "helpers; a silent socket costs a file descriptor and a few KiB, never a thread",
)


@dataclass
class Limited:
    stack: Stack
    nameserver: Proc
    ns_port: int


@pytest.fixture(scope="module")
def limited(hostile_root) -> Iterator[Limited]:
    """A broker and a standalone name server, both serving 16 connections at once."""
    with running_stack(hostile_root, "idle", *LIMITS) as stack:
        ns_port = free_port()
        argv = ["-m", "channel_server", "nameserver", "--ns-port", str(ns_port), *LIMITS]
        nameserver = stack.cluster.start("idle-ns", argv, r"name server ready at")
        yield Limited(stack, nameserver, ns_port)


@contextlib.contextmanager
def silent_sockets(address: tuple[str, int], count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections to ``address`` that never send a byte (fewer if the server
    stops accepting them: a connect that does not complete in time is not retried)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            try:
                socks.append(socket.create_connection(address, timeout=CONNECT_TIMEOUT_S))
            except OSError:
                break
        yield socks
    finally:
        for sock in socks:
            sock.close()


def _where(limited: Limited, where: str) -> tuple[tuple[str, int], Proc, Callable[[], float]]:
    stack = limited.stack
    if where == "broker":
        return stack.broker_address, stack.broker, stack.probe.round
    if where == "embedded-ns":
        return ("127.0.0.1", stack.ns_port), stack.broker, stack.probe.round
    return (
        ("127.0.0.1", limited.ns_port),
        limited.nameserver,
        lambda: name_server_round(limited.ns_port),
    )


@pytest.mark.parametrize("where", ["broker", "embedded-ns", "standalone-ns"])
def test_silent_sockets_leave_room_for_a_normal_client(limited: Limited, where: str) -> None:
    address, proc, client_round = _where(limited, where)
    with Sampler(proc.popen.pid) as sampler, silent_sockets(address, IDLE_SOCKETS) as socks:
        through, error = timed(client_round)
    note = f"{len(socks)} silent sockets open during the round"
    row = record_attack(
        f"{IDLE_SOCKETS} idle sockets on {where}", proc, sampler, through, note=note
    )
    found = failures(row, IDLE_BOUND, error)
    assert not found, "\n".join(found)
