"""A member of a consumer group: what it owns, what it holds, and how healthy it looks.

Pure state (DESIGN §6): no clock reads, no threads, no I/O; times are passed in. Delivery
and completion are told apart: a push hands a batch over (a short call judged by the ack
timeout and the delay rules), and acks come back later, event by event, as handlers finish.
So a member *holds* events (its flights) between the two, and how many it may hold adapts
to how fast it finishes them (:class:`Window`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from channel_server.core.health import DelayPolicy, DelayTracker
from channel_server.events import Event, PartitionKey

PULL_CALLBACK = ""
"""The callback of a pull member: it has none, it calls ``get``."""
PULL_CLOSED = "closed: back with its next get"
"""Why a pull member is inactive after its client closed (``release``): routine, not a
failure, so logged as such."""


@dataclass(frozen=True)
class WindowPolicy:
    """How many events a member may hold: about ``hold_s`` seconds of its work."""

    initial: int = 10
    """Held before the member's pace is known (never more than its prefetch)."""
    hold_s: float = 1.0
    smoothing: float = 0.3
    """Weight of the newest pace sample in the running average."""


STALL_PACES = 10
"""No ack for this many times a member's time per event: its work in hand is a long job."""
STALL_FLOOR_S = 0.25
"""...but never sooner than this: acks of quick events come every few ms (the subscriber
sends them while a handler runs), not every few µs."""


class Window:
    """Adapts what a member holds to its pace: a slow handler holds few events, so work
    queued behind it can still go to a member that is free (work is not trapped behind a
    long job), while a fast one holds up to its whole prefetch (fewer, fuller pushes)."""

    __slots__ = ("_policy", "per_event_s", "prefetch")

    def __init__(self, prefetch: int, policy: WindowPolicy) -> None:
        self.prefetch = prefetch
        self._policy = policy
        self.per_event_s: float | None = None
        """Running average of the seconds one event takes, None until measured."""

    def limit(self) -> int:
        if self.per_event_s is None:
            return min(self.prefetch, self._policy.initial)
        if self.per_event_s <= 0:
            return self.prefetch
        return max(1, min(self.prefetch, int(self._policy.hold_s / self.per_event_s)))

    def stalled(self, quiet_s: float) -> bool:
        """Whether ``quiet_s`` without an ack, while holding work, is far longer than its
        pace says an event takes (at most ``hold_s``): what was pushed behind that job
        waits for it, so nothing more should be."""
        pace = self.per_event_s
        limit = self._policy.hold_s
        if pace is not None:
            limit = max(STALL_FLOOR_S, min(limit, STALL_PACES * pace))
        return quiet_s > limit

    def observe(self, completed: int, busy_s: float) -> None:
        """``completed`` events finished over ``busy_s`` seconds of holding work."""
        if completed <= 0:
            return
        sample = max(0.0, busy_s) / completed
        if self.per_event_s is None:
            self.per_event_s = sample
        else:
            self.per_event_s += self._policy.smoothing * (sample - self.per_event_s)


class Flight(msgspec.Struct, gc=False):
    """One event handed to a member and not yet resolved (a struct: one is built per
    delivery, 2.5x cheaper than a slotted dataclass)."""

    event: Event
    attempt: int
    seq: int
    """Its place in the member's delivery stream (per session): handlers run in this order,
    so an ack for a later event means an earlier one without an ack was skipped."""
    sent_at: float


@dataclass
class Batch:
    """Events pushed to one member in one call, grouped partition by partition."""

    group: str
    member_id: str
    session: int
    first_seq: int
    events: list[Event]
    attempts: list[int]

    @property
    def seqs(self) -> range:
        """Its events' places in the member's delivery stream."""
        return range(self.first_seq, self.first_seq + len(self.events))

    def to_wire(self) -> dict[str, Any]:
        """The push's plain form: a map per event (``Event.to_dict``)."""
        return {
            "session": self.session,
            "seq": self.first_seq,
            "events": [ev.to_dict(att) for ev, att in zip(self.events, self.attempts, strict=True)],
        }

    def to_wire_packed(self) -> dict[str, Any] | None:
        """The push with its events packed: the plain form's list as one msgpack byte
        string, encoded in C from a struct per event. None when a payload is of a kind
        only the plain form's encoder carries (or cannot be sent at all: the plain push
        then fails, and finds the events at fault)."""
        pushed = [
            _Pushed(ev.id, ev.publisher_id, ev.partition, ev.timestamp, ev.payload, ev.offset, att)
            for ev, att in zip(self.events, self.attempts, strict=True)
        ]
        try:
            events = _PUSH_ENCODER.encode(pushed)
        except (TypeError, ValueError, OverflowError):
            return None
        return {"session": self.session, "seq": self.first_seq, "events": events}


class _Pushed(msgspec.Struct, gc=False):
    """One event as a push carries it: the fields and order of ``Event.to_dict``."""

    id: str
    publisher_id: str
    partition: Any
    timestamp: float
    payload: Any
    offset: int
    attempt: int


_PUSH_ENCODER = msgspec.msgpack.Encoder()


@dataclass
class Member:
    """A subscriber in a group. ``queued`` counts pending events of owned partitions."""

    member_id: str
    callback: str
    prefetch: int
    session: int = 1
    """Changes each time the member (re)joins; acks of an older session are stale."""
    pull: bool = False
    handed_after: str | None = None
    """A pull member: the last uid named by the get that handed out what it holds; a get
    naming it again is that get retried (its reply was lost), any other is not this
    client's (:meth:`~channel_server.pull.PullSide.get`)."""
    user: str = "owner"
    """The user that owns this subscriber id: only it (or an admin) may act for it."""
    secret: str = ""
    """What the broker presents to the member's callback daemon (it admits only that)."""
    active: bool = True
    inactive_reason: str = ""
    partitions: dict[PartitionKey, None] = field(default_factory=dict)
    """Owned partitions, longest owned first (a dict for that order; the values are None)."""
    ready: dict[PartitionKey, None] = field(default_factory=dict)
    """Owned partitions ready to send, oldest readiness first (round robin)."""
    queued: int = 0
    flights: dict[str, Flight] = field(default_factory=dict)
    """Events held, by uid (``publisher_id/id``), in delivery order."""
    owed: int = 0
    """Pending events back from it that it may have processed (a lost ack, a failed push):
    it still holds them, in a way, so they count against its window."""
    next_seq: int = 1
    answered_seq: int = 0
    """The last delivery of this session whose push was answered (pushes to a member go
    one at a time): a flight past it may never have reached the member."""
    maybe_killed_by: int | None = None
    """The offset of the one event a push held that failed once it went out, until a
    sign of life: if the member turns out dead first (declared so, or back in a new
    session), that death is the event's (see :mod:`~channel_server.core.poison`)."""
    last_seen: float = 0.0
    """Last sign of life: a push answered, an ack, a heartbeat, a ping or a get."""
    busy_since: float | None = None
    stalled_on: float | None = None
    """The ``busy_since`` of its work in hand when that was seen making no progress for a
    window's time (a long job): no room while ``busy_since`` is still that (progress, or
    nothing held, moves it on)."""
    retry_at: float = 0.0
    """No push before this (back-off after a failed one)."""
    transport_failures: int = 0
    """Pushes and pings failed in a row."""
    ack_failures: int = 0
    """Ack messages in a row that skipped an event they should have covered."""
    delivered: int = 0
    batches: int = 0
    """Batches handed to it (pushes, or the batches of its gets): ``delivered / batches``
    is how full they were, and each batch costs an RPC and an ack whatever its size."""
    ack_messages: int = 0
    """Ack messages applied (a push member's acks; a pull member's gets that ack)."""
    acked: int = 0
    failures: int = 0
    delays: DelayTracker = field(default_factory=lambda: DelayTracker(DelayPolicy()))
    offloaded: bool = False
    """Its queued work was moved away for slowness; no rebalance hands it more until a
    push of its is fast again (or it rejoins)."""
    offloads: int = 0
    """Times its queued partitions were moved away for slowness (a total, for metrics)."""
    window: Window = field(default_factory=lambda: Window(100, WindowPolicy()))

    @property
    def in_flight(self) -> int:
        return len(self.flights)

    def check_stall(self, now: float) -> bool:
        """Whether its work in hand is stalled now (marked so: no room till it moves)."""
        busy = self.busy_since
        if busy is None or not self.flights:
            return False
        if self.stalled_on != busy and self.window.stalled(now - busy):
            self.stalled_on = busy
        return self.stalled

    @property
    def room(self) -> int:
        """How many more events it may be given now (besides those it owes): a member
        never holds more than its window, counting events whose acks were lost; none while
        its work in hand is stalled (see ``stalled_on``)."""
        if self.stalled:
            return 0
        return self.window.limit() - len(self.flights) - self.owed

    @property
    def stalled(self) -> bool:
        """Its work in hand was seen stalled (:meth:`check_stall`) and has not moved on."""
        return self.stalled_on is not None and self.stalled_on == self.busy_since

    def load(self, partition_weight: int) -> int:
        return partition_weight * len(self.partitions) + self.queued + len(self.flights)

    def seen(self, now: float) -> None:
        self.last_seen = max(self.last_seen, now)
        self.maybe_killed_by = None  # alive: whatever failed was not a death
