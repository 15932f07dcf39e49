"""Typed configuration, one frozen dataclass per component, units in the names."""

from __future__ import annotations

from dataclasses import dataclass, field

from channel_server.core.group import GroupPolicy
from channel_server.core.health import DelayPolicy
from channel_server.core.member import WindowPolicy
from channel_server.events import DEFAULT_MAX_PAYLOAD_BYTES, MAX_ID_CHARS, IdScope
from channel_server.monitor.settings import HttpConfig
from channel_server.transport import TransportConfig
from channel_server.wire import DEFAULT_HOST, DEFAULT_NS_PORT


@dataclass(frozen=True)
class ChannelConfig:
    """How one channel queues, assigns and delivers."""

    capacity: int = 1_000_000
    """Most unacknowledged events held; publishing past it raises QueueFull."""
    max_queued_bytes: int = 256 << 20
    """Most bytes of unacknowledged events held (ids and payloads, as
    :func:`~channel_server.events.payload_size` counts them), beside ``capacity``;
    publishing past it raises QueueFull too. At least one largest event."""
    max_members: int = 1000
    """Most subscribers (push and pull, of every group) a channel keeps; at the cap a
    new one takes the place of the one inactive longest, or gets LimitReached."""
    member_expiry_s: float = 600.0
    """A member inactive (declared dead, timed out) with no sign of life for this long is
    forgotten: removed from its group and the store, so crashed subscribers do not stay
    listed; one that comes back subscribes again as a new member. Ten minutes rides out
    a frozen process, a paused VM or a slow restart, which resume their subscription. The
    last member of a group other than ``default`` is kept (its group holds events for
    it). 0: never."""
    callback_hosts: tuple[str, ...] = ()
    """Hosts a push subscriber's callback may name besides the address its subscribe
    call came from ("*": any). In-process calls (no connection) are not checked."""
    partition_weight: int = 10
    """Load of owning one partition, in events (DESIGN §5)."""
    default_prefetch: int = 100
    """Most unacknowledged events a subscriber holds when it does not say."""
    window_initial: int = 10
    """Events a push member may hold before its pace is known."""
    window_hold_s: float = 1.0
    """A push member holds about this many seconds of its own work (at most its
    prefetch): a slow handler holds few events, so the rest can go to free members."""
    max_prefetch: int = 10_000
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_publish_batch: int = 100_000
    ack_timeout_s: float = 5.0
    """Timeout of one push round trip (handing a batch over, not processing it); also how
    long a member holding events may stay silent before it is pinged."""
    handler_timeout_s: float = 1800.0
    """Longest a member may hold one event while it answers pings (a handler that hangs);
    then it is marked inactive and the event moves on. Like RabbitMQ's consumer timeout."""
    heartbeat_s: float = 2.0
    """How often a push subscriber tells the channel it is alive (and learns whether it
    was dropped, to subscribe again)."""
    pull_timeout_s: float = 60.0
    """A pull member with no ``get`` for this long is marked inactive; its partitions and
    the message it held move on (it is readmitted by its next ``get``)."""
    max_attempts: int = 3
    """Consecutive failed pushes before a member is inactive; handler failures before an
    event goes to the dead-letter queue."""
    retry_backoff_s: float = 0.05
    """First pause after a failed push; doubles with each further failure."""
    small_delay_s: float = 0.25
    long_delay_s: float = 1.0
    long_delay_count: int = 3
    long_delay_window_s: float = 30.0
    rebalance_threshold: int = 1
    """A joining member takes idle partitions from any member owning more than this many
    partitions above its own count."""
    partition_idle_s: float = 30.0
    """An empty partition with nothing in flight is dropped after this long."""
    dedupe_max_ids: int = 1_000_000
    dedupe_max_age_s: float = 24 * 3600.0
    queue_full_retry_s: float = 0.5
    """Retry hint given with QueueFull."""
    dispatch_linger_s: float = 0.002
    """How long a dispatcher waits for more events before sending a batch smaller than
    the member's free prefetch (like Kafka's linger.ms): fewer, fuller pushes under load,
    for at most this much latency. 0 sends at once."""
    rate_window_s: float = 10.0
    """``stats`` reports the events/s accepted and acknowledged over about this long
    (sampled by the housekeeping round)."""
    liveness_timeout_s: float = 1.0
    """Timeout of a ping: a silent member, or one whose id is claimed again."""

    def __post_init__(self) -> None:
        if self.max_queued_bytes < self.max_payload_bytes + MAX_ID_CHARS:
            raise ValueError(
                f"max_queued_bytes ({self.max_queued_bytes}) must hold one largest event "
                f"({self.max_payload_bytes + MAX_ID_CHARS} bytes)"
            )

    def delay_policy(self) -> DelayPolicy:
        return DelayPolicy(
            self.small_delay_s, self.long_delay_s, self.long_delay_count, self.long_delay_window_s
        )

    def group_policy(self) -> GroupPolicy:
        return GroupPolicy(
            self.partition_weight,
            self.max_attempts,
            self.rebalance_threshold,
            self.retry_backoff_s,
            self.delay_policy(),
            WindowPolicy(self.window_initial, self.window_hold_s),
        )


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
    still under 5 ms (docs/benchmarks.md)."""
    transport: TransportConfig = field(default_factory=TransportConfig)
    """Connections served at once, idle and handshake timeouts, largest message."""
    push_threads: int = 8
    """Threads that push batches to every push member of every channel (a bounded pool,
    not a thread per subscriber; a push only hands a batch over, so it is short)."""
    max_channels: int = 1000
    """Most channels the broker hosts (those its store restores always come back); one
    more raises LimitReached."""
    housekeeping_s: float = 1.0
    """Cadence of the broker's housekeeping: liveness pings, handler and pull timeouts,
    idle partitions, the dedupe window, the queue invariant."""
    channel: ChannelConfig = field(default_factory=ChannelConfig)
    http: HttpConfig | None = None
    """The HTTP monitor (metrics, JSON API, live page; ``serve --http``). None: off."""
