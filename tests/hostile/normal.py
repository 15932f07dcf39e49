"""A normal client's round trip, timed: does the service still serve while under attack?

One round is what a user does: list the channels in the name server, subscribe, publish,
and receive, through new connections, as the client libraries make them. The event is
received twice: by a pull subscriber in a fresh group (``get``) and by the channel's push
subscriber process. Every step shares one deadline, so a hung service fails the round at
its deadline instead of hanging the test.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

from channel_server.wire import NS_CHANNEL_PREFIX, channel_ns_name, locate_ns, make_proxy
from publisher.client import Publisher
from subscriber.record import read_records
from tests.integration.procs import wait_until

ROUND_TIMEOUT_S = 5.0
"""The issue's bar: a normal client gets through within 5 s, whatever else is connected."""
PUBLISHER_ID = "probe"
_rounds = itertools.count(1)


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.end = self.start + seconds

    def left(self) -> float:
        """Seconds left (at least a little, so a step past the deadline fails fast)."""
        return max(0.05, self.end - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.start


@dataclass(frozen=True)
class Probe:
    """A normal client of ``channel`` on the name server at ``ns_port``; ``record`` is
    the record file of the channel's push subscriber."""

    ns_port: int
    channel: str
    record: Path

    def round(self, timeout_s: float = ROUND_TIMEOUT_S) -> float:
        """One round; returns the seconds it took, or raises (AssertionError at the
        deadline, or the error a step got)."""
        n = next(_rounds)
        deadline = Deadline(timeout_s)
        sub_id, group = f"probe-{n}", f"probe-group-{n}"
        with locate_ns("127.0.0.1", self.ns_port, deadline.left()) as ns:
            listed = ns.list(prefix=NS_CHANNEL_PREFIX)
        assert channel_ns_name(self.channel) in listed, f"{self.channel} not listed: {listed}"
        uri = listed[channel_ns_name(self.channel)]
        with make_proxy(uri, deadline.left()) as channel:
            channel.subscribe(sub_id, None, group)
        with Publisher(
            self.channel, PUBLISHER_ID, ns_port=self.ns_port, timeout_s=deadline.left(), next_seq=n
        ) as pub:
            event = pub.event(f"round {n}")
            assert pub.publish([event])["accepted"] == 1
        with make_proxy(uri, deadline.left()) as channel:
            got = channel.get(sub_id, None, group)
            assert got.get("event", {}).get("id") == event["id"], got
            channel.unsubscribe(sub_id, group)
        wait_until(
            lambda: event["id"] in {r["id"] for r in read_records(self.record)},
            deadline.left(),
            f"the push subscriber to process {event['id']}",
        )
        return deadline.elapsed()


def name_server_round(ns_port: int, timeout_s: float = ROUND_TIMEOUT_S) -> float:
    """A name server's normal use: register a name (as a broker would), look it up,
    list it and remove it. Returns the seconds it took."""
    n = next(_rounds)
    deadline = Deadline(timeout_s)
    name, uri = f"probe.round-{n}", f"PYRO:probe@127.0.0.1:{n % 65535 + 1}"
    with locate_ns("127.0.0.1", ns_port, deadline.left()) as ns:
        ns.register(name, uri)
        assert str(ns.lookup(name)) == uri
        assert name in ns.list(prefix="probe.")
        assert ns.remove(name) == 1
    return deadline.elapsed()
