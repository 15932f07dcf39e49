"""A broker that cannot start a thread for a connection (its memory or threads exhausted)
refuses that connection as busy and serves on once it can: its accept loop, Pyro5's,
ended on the first such error, and the process lived on deaf to everyone (session 33's
review). The trigger is real: the broker's address space limited (``prlimit``) below what
another thread's stack needs, then lifted."""

from __future__ import annotations

import re
import resource
from pathlib import Path

import Pyro5.client
import Pyro5.errors

from channel_server.wire import NS_BROKER_PREFIX, locate_ns, make_proxy
from tests.integration.conftest import bind_or_refusal
from tests.integration.procs import Cluster

THREAD_ROOM_BYTES = 48 << 20
"""Address space left above the broker's own: a few threads' stacks (8 MiB each)."""
MAX_HELD = 60


def _vm_size(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmSize:\s+(\d+) kB", status)[1]) * 1024  # type: ignore[index]


def test_a_connection_without_a_thread_is_refused_as_busy_and_the_broker_serves_on(
    cluster: Cluster,
) -> None:
    broker = cluster.broker("jobs", extra=("--memory",))
    with locate_ns("127.0.0.1", cluster.ns_port) as ns:
        uri = str(ns.lookup(NS_BROKER_PREFIX + "b1"))
    pid = broker.popen.pid
    held: list[Pyro5.client.Proxy] = []
    refusal = ""
    limit = _vm_size(pid) + THREAD_ROOM_BYTES
    resource.prlimit(pid, resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    try:
        while not refusal and len(held) < MAX_HELD:
            got = bind_or_refusal(uri)
            if isinstance(got, str):
                refusal = got
            else:
                held.append(got)
    finally:
        resource.prlimit(pid, resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)
        for proxy in held:
            proxy._pyroRelease()
    assert refusal, f"no connection refused in {MAX_HELD}: the limit did not bite"
    with make_proxy(uri, 5.0) as fresh:  # everyone gone and the limit lifted: served again
        assert fresh.channels() == ["jobs"]
    # mostly the busy refusal; the limit may also fail another allocation on the way to
    # the thread (a connection closed, logged with its trace): the loop lives through both
    said = broker.count("no thread for a connection") + broker.count("failed in the accept loop")
    assert said >= 1, broker.output()
    if "busy" not in refusal:
        assert broker.count("failed in the accept loop") >= 1, (refusal, broker.output())
