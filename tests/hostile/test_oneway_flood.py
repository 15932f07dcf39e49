"""1,500 oneway-flagged requests on one connection.

Pyro5 runs each oneway call on a thread of its own, without bound (the issue saw 961
broker threads). Here each request would hold its thread about a second: it claims a
subscriber id that is active at a callback which accepts connections and never answers (a
tarpit), so the broker pings that callback before refusing. The broker must refuse oneway
requests instead (close the connection), so the thread count stays bounded, and serve a
normal client meanwhile.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import msgpack
import Pyro5.protocol as wire
import pytest

from channel_server.wire import make_proxy
from tests.hostile import tally
from tests.hostile.health import Bound, failures, record_attack, timed
from tests.hostile.procinfo import Sampler
from tests.hostile.rawwire import RawConnection, frame
from tests.hostile.services import Stack, owner, running_stack
from tests.hostile.tally import Outcome, Tally

pytestmark = pytest.mark.hostile
ONEWAY_CALLS = 1500
FLOOD_CHANNEL = "flood"
VICTIM = "victim"
SECRET = "s" * 32
TARPIT_BACKLOG = 4096
ONEWAY_BOUND = Bound(
    threads=16,
    rss_mib=32,
    why="the flood uses one connection (one worker); a refused oneway request starts no "
    "thread, so only the normal client's connections (a few) and 8 helpers may add any",
)


@pytest.fixture(scope="module")
def stack(hostile_root) -> Iterator[Stack]:
    with running_stack(hostile_root, "oneway", "--memory", channels=(FLOOD_CHANNEL,)) as s:
        yield s


@contextlib.contextmanager
def tarpit() -> Iterator[int]:
    """A port on 127.0.0.1 whose connections the kernel completes and nobody serves."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(TARPIT_BACKLOG)
        yield sock.getsockname()[1]


def _claim_frame(n: int, port: int) -> bytes:
    """A oneway subscribe of VICTIM from another callback: the broker first pings the
    victim's callback (the tarpit) for up to its liveness timeout."""
    callback = f"PYRO:subscriber.other{n}@127.0.0.1:{port}"
    args = [VICTIM, callback, None, 10, SECRET]
    payload = msgpack.packb((f"channel.{FLOOD_CHANNEL}", "subscribe", args, {}))
    return frame(wire.MSG_INVOKE, payload, flags=wire.FLAGS_ONEWAY, seq=n & 0xFFFF)


def test_a_oneway_flood_leaves_the_thread_count_bounded(stack: Stack) -> None:
    results = Tally()
    pid = stack.broker.popen.pid
    with tarpit() as port:
        with make_proxy(stack.channel_uri(FLOOD_CHANNEL), 10.0) as channel:
            channel.subscribe(
                VICTIM, f"PYRO:subscriber.{VICTIM}@127.0.0.1:{port}", None, 10, SECRET
            )
        frames = [_claim_frame(n, port) for n in range(ONEWAY_CALLS)]
        with Sampler(pid) as sampler, RawConnection(stack.broker_address) as conn:
            assert conn.connect(owner().credential).type == wire.MSG_CONNECTOK
            with contextlib.suppress(OSError):  # the broker hung up: refused
                for data in frames:
                    conn.send(data)
                    results.add("oneway subscribe", Outcome(tally.SENT))
            through, error = timed(stack.probe.round)
            closed = conn.closed_by_peer(timeout_s=5.0)
    note = f"{results.calls} oneway requests sent; the broker closed the connection: {closed}"
    row = record_attack("oneway flood", stack.broker, sampler, through, results, note)
    found = failures(row, ONEWAY_BOUND, error)
    if not closed:
        found.append("the broker kept open a connection that sent oneway requests")
    assert not found, "\n".join(found)
