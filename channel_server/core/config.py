"""The configuration of one channel: limits, timeouts and the policies the core applies.

In the core because the core consumes it and must not import :mod:`channel_server.config`,
whose :class:`~channel_server.config.BrokerConfig` needs the transport (and so Pyro5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from channel_server.core.group import GroupPolicy
from channel_server.core.health import DelayPolicy
from channel_server.core.member import WindowPolicy
from channel_server.events import DEFAULT_MAX_PAYLOAD_BYTES, MAX_ID_CHARS

FLAG_KINDS = ("positive_int", "non_negative_int", "positive_float", "non_negative_float")
"""How a setting's ``serve`` flag is parsed (the functions of that name in cli_common)."""


def setting(default: Any, flag: str, kind: str, text: str) -> Any:
    """A field ``serve`` takes as ``flag`` (parsed as ``kind``, one of FLAG_KINDS), with
    ``text`` as its help: the flag table is made from these, so a setting, its default
    and its flag are written once."""
    if kind not in FLAG_KINDS:
        raise ValueError(f"unknown flag kind {kind!r}")
    return field(default=default, metadata={"flag": flag, "kind": kind, "help": text})


@dataclass(frozen=True)
class ChannelConfig:
    """How one channel queues, assigns and delivers."""

    capacity: int = setting(
        1_000_000,
        "--capacity",
        "positive_int",
        "most unacknowledged events per channel",
    )
    """Most unacknowledged events held; publishing past it raises QueueFull."""
    max_partition_queues: int = setting(
        1_000_000,
        "--max-partition-queues",
        "positive_int",
        "most partition sub-queues per channel, over all its groups",
    )
    """Most partition sub-queues a channel holds, counting each group's own: a group keeps
    one per partition it holds events of (or held them within ``partition_idle_s``), about
    600 B each, so a channel's memory grew with its groups times its partition keys.
    Publishing a batch that would open more raises QueueFull (idle ones are dropped
    first)."""
    max_queued_bytes: int = 256 << 20
    """Most bytes of unacknowledged events held (ids and payloads, as
    :func:`~channel_server.events.payload_size` counts them), beside ``capacity``;
    publishing past it raises QueueFull too. At least one largest event."""
    payload_memory_bytes: int = 16 << 20
    """The oldest this many bytes of a channel's backlog (as ``max_queued_bytes`` counts
    them) keep their payloads in memory; events accepted past them are queued without,
    and their payloads are read back from the store a batch at a time when they are taken
    for delivery (see :mod:`~channel_server.core.spill`). A channel over the memory store
    keeps every payload."""
    max_members: int = 1000
    """Most subscribers (push and pull, of every group) a channel keeps; at the cap a
    new one takes the place of the one inactive longest, or gets LimitReached."""
    max_members_per_user: int = setting(
        0,
        "--max-members-per-user",
        "non_negative_int",
        "most of a channel's members one user of the users file may hold (its owner and "
        "admins: any); 0: half of --max-members",
    )
    """One user's subscriptions kept every other user out of a channel: the last member
    of a group is never replaced to make room (session 33's attacker probe)."""

    @property
    def member_share(self) -> int:
        """What ``max_members_per_user`` comes to."""
        return self.max_members_per_user or max(1, self.max_members // 2)

    member_expiry_s: float = setting(
        600.0,
        "--member-expiry",
        "non_negative_float",
        "seconds an inactive member (declared dead, timed out) may give no sign of life "
        "before it is forgotten, as if it unsubscribed; the last member of a group other than"
        " default is kept (0: never)",
    )
    """A member inactive (declared dead, timed out) with no sign of life for this long is
    forgotten: removed from its group and the store, so crashed subscribers do not stay
    listed; one that comes back subscribes again as a new member. Ten minutes rides out
    a frozen process, a paused VM or a slow restart, which resume their subscription. The
    last member of a group other than ``default`` is kept (its group holds events for
    it). 0: never."""
    callback_hosts: tuple[str, ...] = ()
    """Hosts a push subscriber's callback may name besides the address its subscribe
    call came from ("*": any). In-process calls (no connection) are not checked."""
    partition_weight: int = setting(
        10,
        "--partition-weight",
        "non_negative_int",
        "load of owning one partition, in events",
    )
    """Load of owning one partition, in events (DESIGN §5)."""
    default_prefetch: int = 100
    """Most unacknowledged events a subscriber holds when it does not say."""
    window_initial: int = 10
    """Events a push member may hold before its pace is known."""
    window_hold_s: float = setting(
        1.0,
        "--window-hold",
        "positive_float",
        "seconds of its own work a push subscriber holds at most (its prefetch caps it)",
    )
    """A push member holds about this many seconds of its own work (at most its
    prefetch): a slow handler holds few events, so the rest can go to free members."""
    max_prefetch: int = 10_000
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_publish_batch: int = 100_000
    ack_timeout_s: float = setting(
        5.0,
        "--ack-timeout",
        "positive_float",
        "seconds a push (handing a batch over) may take before it counts as failed; also how "
        "long a subscriber holding events may stay silent before it is pinged",
    )
    """Timeout of one push round trip (handing a batch over, not processing it); also how
    long a member holding events may stay silent before it is pinged."""
    handler_timeout_s: float = setting(
        1800.0,
        "--handler-timeout",
        "positive_float",
        "seconds a subscriber may hold one event while it answers pings (a hung handler)",
    )
    """Longest a member may hold one event while it answers pings (a handler that hangs);
    then it is marked inactive and the event moves on. Like RabbitMQ's consumer timeout."""
    heartbeat_s: float = setting(
        2.0,
        "--heartbeat",
        "positive_float",
        "seconds between a push subscriber's heartbeats (it learns whether it was dropped)",
    )
    """How often a push subscriber tells the channel it is alive (and learns whether it
    was dropped, to subscribe again)."""
    pull_timeout_s: float = setting(
        60.0,
        "--pull-timeout",
        "positive_float",
        "seconds without a get before a pull subscriber is marked inactive",
    )
    """A pull member with no ``get`` for this long is marked inactive; its partitions and
    the message it held move on (it is readmitted by its next ``get``)."""
    max_attempts: int = setting(
        3,
        "--max-attempts",
        "positive_int",
        "failed pushes in a row before a subscriber is inactive; handler failures before an "
        "event is dead-lettered",
    )
    """Consecutive failed pushes before a member is inactive; handler failures before an
    event goes to the dead-letter queue."""
    max_crashes: int = setting(
        5,
        "--max-crashes",
        "non_negative_int",
        "dead-letter an event after this many subscribers died or went silent while it was "
        "the only event they held (a poison event); 0: never",
    )
    """Only a handler's failures (``max_attempts``) dead-letter an event, and a subscriber
    killed by its handler is not one: a poison event went round the subscribers for ever
    (session 34's newcomer: 214 crashes in 60 s). After a death the events its member held
    go out alone, so a death is the event's own; this many and it is dead-lettered (see
    :mod:`~channel_server.core.poison`). Counted in memory: a restart counts again."""
    max_dead_letters: int = setting(
        10_000,
        "--max-dead-letters",
        "positive_int",
        "most dead letters a channel keeps; past it, or past --max-dead-letter-bytes, the "
        "oldest are dropped (logged)",
    )
    """Dead letters are out of ``capacity`` and ``max_queued_bytes`` (no longer queued),
    so they have caps of their own: a handler that always fails would otherwise hold every
    event published, payloads and all. The oldest go first, as a retention does."""
    max_dead_letter_bytes: int = setting(
        16 << 20,
        "--max-dead-letter-bytes",
        "positive_int",
        "most bytes of dead letters (ids and payloads) a channel keeps; the oldest go first",
    )
    """Under the wire's message cap, so one listing of them always fits in a reply."""
    retry_backoff_s: float = 0.05
    """First pause after a failed push; doubles with each further failure."""
    small_delay_s: float = setting(
        DelayPolicy.small_delay_s,
        "--small-delay",
        "positive_float",
        "a push slower than this many seconds is a small delay",
    )
    long_delay_s: float = setting(
        DelayPolicy.long_delay_s,
        "--long-delay",
        "positive_float",
        "a push slower than this many seconds is a long delay",
    )
    long_delay_count: int = setting(
        DelayPolicy.long_delay_count,
        "--long-delay-count",
        "positive_int",
        "long delays within the window that move a member's queued partitions",
    )
    long_delay_window_s: float = setting(
        DelayPolicy.long_delay_window_s,
        "--long-delay-window",
        "positive_float",
        "seconds over which long delays are counted",
    )
    rebalance_threshold: int = setting(
        1,
        "--rebalance-threshold",
        "non_negative_int",
        "a joining member takes idle partitions from members owning more than this many above it",
    )
    """A joining member takes idle partitions from any member owning more than this many
    partitions above its own count."""
    partition_idle_s: float = setting(
        30.0,
        "--partition-idle",
        "positive_float",
        "seconds an empty partition is kept",
    )
    """An empty partition with nothing in flight is dropped after this long."""
    dedupe_max_ids: int = setting(
        1_000_000,
        "--dedupe-max-ids",
        "positive_int",
        "ids remembered for duplicate detection",
    )
    dedupe_max_age_s: float = setting(
        24 * 3600.0,
        "--dedupe-max-age",
        "positive_float",
        "seconds an id is remembered for duplicate detection",
    )
    queue_full_retry_s: float = 0.5
    """Retry hint given with QueueFull."""
    dispatch_linger_s: float = setting(
        0.02,
        "--dispatch-linger",
        "non_negative_float",
        "most seconds after a push that a batch smaller than a subscriber's free prefetch "
        "waits for the subscriber to acknowledge what it holds (0: push at once)",
    )
    """Nagle's rule for pushes: a batch smaller than the member's free prefetch, for a
    member holding unacknowledged events, goes when its last ack comes, at most this long
    after its last push. 0 sends at once."""
    answer_wait_s: float = setting(
        0.005,
        "--answer-wait",
        "non_negative_float",
        "most seconds a subscriber may take to finish a push's events and put their acks "
        "in its reply to the push, instead of sending them in a call of its own (0: acks "
        "always come in calls)",
    )
    """Each push offers the subscriber this long to answer with the acks of its events,
    which saves the ack call's round trip and two thread wake-ups on each side; a handler
    that takes longer acks by a call as before. Part of each push's round trip, so well
    below ``small_delay_s``. Measured against acks by call only: the default workload
    1.11x, 64 subscribers 1.11x (p50 95 -> 59 ms), latency at 1,000 events/s unchanged."""
    stream_linger_s: float = setting(
        0.004,
        "--stream-linger",
        "non_negative_float",
        "seconds a batch smaller than a subscriber's free prefetch, for a subscriber "
        "holding nothing, waits for more events while publishes stream in fast enough "
        "that the wait should make it half again as full (0: no wait)",
    )
    """Kafka's linger.ms, only where it pays: a member holding nothing gets a short batch
    after this wait when publishes arrive closely enough that it is expected to make the
    batch half again as full (:mod:`~channel_server.core.arrivals`), so a stream of small
    publishes is sent in fuller pushes while a channel published to in bursts, or not
    busy, adds no latency. Measured against the 2 ms linger for members pushed within the
    last 5 ms that it replaced: one-event publishes 1.24x (median of 5 pairs), the default
    workload 1.11x, p99 at 1,000 events/s offered in batches of 10 unchanged; 1,000
    one-event publishes a second wait for it: p50 +1.7 ms, broker CPU -19 to -29 %."""
    busy_cpu: float = setting(
        0.8,
        "--busy-cpu",
        "non_negative_float",
        "share of one core the broker process must have used over the last second for "
        "short pushes to wait up to --busy-linger to fill (0: never)",
    )
    """When the broker is busy on its CPU (:mod:`~channel_server.core.load`): at this share
    of a core (the GIL makes about one the most its Python code gets), the fixed cost of
    each push and its ack is what limits it, and fuller pushes deliver more."""
    busy_machine: float = setting(
        0.75,
        "--busy-machine",
        "non_negative_float",
        "share of the CPUs the broker runs on (its one CPU with --cpu, else all the "
        "machine's) in use over the last second at which the broker counts as busy from "
        "half its --busy-cpu (0: only --busy-cpu counts)",
    )
    """A broker sharing a saturated machine (with its subscribers, say) cannot reach
    ``busy_cpu``, yet each push and its ack cost CPU that everything on it lacks
    (:mod:`~channel_server.core.load`). Measured: 64 subscribers on 2 cores, the machine 80 %
    in use and the broker at 0.76 of a core; 1,000 one-event publishes a second, 27 %."""
    busy_linger_s: float = setting(
        0.1,
        "--busy-linger",
        "non_negative_float",
        "most seconds a batch at most two thirds of a subscriber's free prefetch, for a "
        "subscriber holding nothing, waits to fill while the broker is busy (see --busy-cpu;"
        " 0: no wait)",
    )
    """On a busy broker, a member's short push waits as long as its events are expected to
    take to fill it, at most this long, once (:meth:`~channel_server.core.arrivals.Arrivals
    .filling_linger`). It adds up to this much latency while the broker is saturated, and
    none when it is not."""
    rate_window_s: float = setting(
        10.0,
        "--rate-window",
        "positive_float",
        "seconds over which status reports events/s accepted and acknowledged",
    )
    """``stats`` reports the events/s accepted and acknowledged over about this long
    (sampled by the housekeeping round)."""
    liveness_timeout_s: float = 1.0
    """Timeout of a ping: a silent member, or one whose id is claimed again."""

    def __post_init__(self) -> None:
        if self.answer_wait_s >= self.small_delay_s:
            raise ValueError(
                f"answer_wait_s ({self.answer_wait_s}) must be below small_delay_s "
                f"({self.small_delay_s}): the wait is part of every push's round trip"
            )
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
            max_crashes=self.max_crashes,
        )
