"""Typed configuration, one frozen dataclass per component, units in the names.

:class:`ChannelConfig` lives in :mod:`channel_server.core.config` (the pure core consumes
it) and is re-exported here beside the broker's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from channel_server.core.config import ChannelConfig
from channel_server.events import IdScope
from channel_server.monitor.settings import HttpConfig
from channel_server.names import DEFAULT_HOST, DEFAULT_NS_PORT
from channel_server.transport import TransportConfig

__all__ = ["MAX_LEASE_S", "BrokerConfig", "ChannelConfig"]

MAX_LEASE_S = 10.0
"""The longest lease term: a channel whose owner died is served again within it."""


@dataclass(frozen=True)
class BrokerConfig:
    """How a broker process serves and where it finds its name server."""

    broker_id: str = "b1"
    host: str = DEFAULT_HOST
    """The address the broker's daemon binds to."""
    advertise: str | None = None
    """The host put in the URIs the broker registers in the name server (what clients
    connect to), when it differs from ``host``: behind NAT, or binding to ``0.0.0.0``,
    which no client can connect to (the CLI refuses that bind without it). An IPv6
    address in brackets. None: ``host``."""
    port: int = 0
    """0 picks a free port; the URI is published through the name server."""
    ns_host: str = DEFAULT_HOST
    ns_port: int = DEFAULT_NS_PORT
    channels: tuple[str, ...] = ()
    id_scope: IdScope = IdScope.PUBLISHER
    """Where event ids must be unique in a channel this broker creates without being told
    (its ``channels``, and those clients create without asking): per publisher, or per
    channel. A channel keeps the scope it was created with."""
    allow_fault_injection: bool = False
    insecure_name_server: bool = False
    """Use an existing name server that does not authenticate (a stock pyro5-ns)."""
    switch_interval_s: float = 0.02
    """Python's GIL switch interval in the broker (Python's default is 5 ms). Measured with
    the SQLite store: 1 ms cost 20 % of throughput, 20 ms gained about 15 % (fewer forced
    switches between the publish and dispatcher threads) with p99 latency at 1,000 ev/s
    still under 5 ms (the lab log in docs/benchmarks.md's history: git show
    df84339:docs/benchmarks.md)."""
    transport: TransportConfig = field(default_factory=TransportConfig)
    """Connections served at once, idle and handshake timeouts, largest message."""
    cpu: str = "auto"
    """Where the broker's threads run (see :mod:`~channel_server.cpu_pin`): ``auto``, one
    CPU, the idlest at start (its threads hand the GIL to one another, and a hand-off
    within one core is cheaper: a fifth less CPU per event, measured); ``all``: any, as
    the OS schedules them; or a CPU number."""
    push_threads: int = 4
    """Threads that push batches to every push member of every channel (a bounded pool,
    not a thread per subscriber; a push only hands a batch over, so it is short). A push
    to a frozen subscriber holds a thread until its ack timeout: this many frozen at once
    stall every push for that long."""
    push_concurrency: int = 2
    """Of the ``push_threads``, those that make every push; the others are spares that
    make a push that is full, or one while a push has run longer than
    ``dispatch.SLOW_TASK_S`` (a frozen subscriber). Fewer pushes at once make fuller
    ones: 2 against 4 at 64 subscribers 1.22-1.32x the throughput with lower latency, the
    same at 4 subscribers (docs/benchmarks.md); 4 against 8 had made 1.7-2.0x."""
    max_channels: int = 1000
    """Most channels the broker hosts (those its store restores always come back); one
    more raises LimitReached."""
    lease_s: float = 6.0
    """With a store shared by several brokers (PostgreSQL): the term of this broker's
    channel leases. A channel whose owner stops renewing is taken over by another broker
    within about this long; at most ``MAX_LEASE_S``."""
    names_check_s: float = 5.0
    """With a name server of another process: how often the broker checks that its
    entries are there, registering again those it lost (a restarted name server knows
    none). A client looking a channel up meanwhile retries (``--retry-for``)."""
    housekeeping_s: float = 1.0
    """Cadence of the broker's housekeeping: liveness pings, handler and pull timeouts,
    idle partitions, the dedupe window, the queue invariant."""
    channel: ChannelConfig = field(default_factory=ChannelConfig)
    http: HttpConfig | None = None
    """The HTTP monitor (metrics, JSON API, live page; ``serve --http``). None: off."""
