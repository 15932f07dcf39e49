"""What a channel reports about itself: JSON-friendly snapshots of its core.

:class:`ChannelStats` is the part of a channel that answers ``stats`` and owns the rate
samples; the functions below are pure and read the core under the channel's lock.
``status``, ``list`` and the tests read the same dicts.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

from channel_server.channel_state import ChannelState
from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore
from channel_server.core.group import ConsumerGroup
from channel_server.core.member import Member
from channel_server.core.queues import PartitionQueue
from channel_server.store.base import Store

MAX_RATE_SAMPLES = 1000
"""Samples a RateWindow keeps at most, whatever its span (older ones make room)."""
STATS_PARTITIONS = 1000
"""Partitions a group lists in ``stats`` at most: the busiest (most events pending and in
flight); ``partitions_total`` and ``in_flight`` count them all. The whole list of 100,000
partitions was 5.9 MB of msgpack and 97 ms to build and pack in every ``stats`` reply (the
live page asks every second); now 59 KB, and the busiest are looked for only among the
partitions holding events (0.9 ms with 2,000 of 100,000 holding)."""


class RateWindow:
    """Recent samples of a channel's cumulative counts (accepted, acknowledged), so that
    ``status`` can say how fast events flow now and not only how many flowed since the
    start: totals alone cannot tell a stalled channel from a busy one.

    Pure: the caller passes the time in (the channel's housekeeping round samples, about
    once a second) and holds the channel's lock around every call.
    """

    def __init__(self, span_s: float) -> None:
        self.span_s = span_s
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=MAX_RATE_SAMPLES)
        """(time, accepted, acknowledged), oldest first."""

    def sample(self, now: float, accepted: int, acked: int) -> None:
        """Record the counts at ``now``; forget samples no rate will start from again
        (all but the newest one at least ``span_s`` old)."""
        self._samples.append((now, accepted, acked))
        while len(self._samples) > 1 and self._samples[1][0] <= now - self.span_s:
            self._samples.popleft()

    def rates(self, now: float, accepted: int, acked: int) -> dict[str, float] | None:
        """Events/s accepted and acknowledged from the newest sample at least ``span_s``
        old (or the oldest there is) to the counts at ``now``, and that interval; None
        before the first sample. A replayed dead letter counts as acknowledged no more,
        so the acknowledged rate is never shown below 0."""
        base = None
        for sample in self._samples:
            if base is not None and sample[0] > now - self.span_s:
                break
            base = sample
        if base is None or now <= base[0]:
            return None
        interval = now - base[0]
        return {
            "interval_s": round(interval, 3),
            "accepted_per_s": round(max(0, accepted - base[1]) / interval, 3),
            "acked_per_s": round(max(0, acked - base[2]) / interval, 3),
        }


class ChannelStats:
    """Answers ``stats`` for one channel; owns its rate samples (under the channel lock)."""

    def __init__(
        self, state: ChannelState, store: Store, load: Callable[[], dict[str, Any]]
    ) -> None:
        """``load``: how busy the broker is, as its pushes see it (under the lock)."""
        self._state = state
        self._store = store
        self._load = load
        self._rates = RateWindow(state.config.rate_window_s)

    def sample(self, now: float) -> None:
        """Under the lock (the housekeeping round): note the counts for the rates."""
        core = self._state.core
        self._rates.sample(now, core.accepted_total, core.acked_total)

    def snapshot(self) -> dict[str, Any]:
        """See EventChannel.stats; ``stored`` is counted after the rest, outside the lock
        (the store's count may wait for its writer)."""
        state = self._state
        with state.lock:
            durable = self._store.durable
            stats = channel_stats(state.core, state.config, durable, state.now(), self._rates)
            stats["store_write_s"] = state.timings.store_write.to_dict()
            stats["restore_s"] = round(state.timings.restore_s, 6)
            stats.update(self._load())
        stats["stored"] = self._store.count(state.name)
        return stats


def channel_stats(
    core: ChannelCore, config: ChannelConfig, durable: bool, now: float, rates: RateWindow
) -> dict[str, Any]:
    """Everything ``stats`` answers but the events stored (counted outside the lock);
    ``rates`` is None until the housekeeping round has sampled the counts once."""
    return {
        "name": core.name,
        "kind": core.kind.value,
        "ids": core.id_scope.value,
        "capacity": config.capacity,
        "unacked": core.unacked,
        "max_queued_bytes": config.max_queued_bytes,
        "queued_bytes": core.queued_bytes,
        "max_members": config.max_members,
        "partition_queues": core.partition_queues(),
        "max_partition_queues": config.max_partition_queues,
        "published": core.published_total,
        "duplicates": core.duplicates_total,
        "refused": core.refused_total,
        "unrouted": core.unrouted_total,
        "accepted": core.accepted_total,
        "acked": core.acked_total,
        "payload_memory_bytes": config.payload_memory_bytes,
        "queued_cold": core.spill.cooled_total,
        "read_back": core.spill.warmed_total,
        "rates": rates.rates(now, core.accepted_total, core.acked_total),
        "dead_letters": len(core.dead_letters),
        "durable": durable,
        "groups": {name: group_stats(grp, now) for name, grp in core.groups.items()},
    }


def group_stats(grp: ConsumerGroup, now: float) -> dict[str, Any]:
    return {
        "backlog": grp.backlog,
        "nacked": grp.nacked,
        "redelivered": grp.redelivered,
        "dead_lettered": grp.dead_lettered,
        "suspects": len(grp.suspects),
        "ack_latency_s": grp.ack_latency.to_dict(),
        "members": [
            member_stats(m, now) for m in sorted(grp.members.values(), key=lambda m: m.member_id)
        ],
        "partitions_total": len(grp.partitions),
        "in_flight": grp.in_flight,
        "partitions": [_partition_row(pq) for pq in _busiest(grp)],
    }


def _partition_row(pq: PartitionQueue) -> dict[str, Any]:
    return {
        "publisher_id": pq.key[0],
        "partition": pq.key[1],
        "owner": pq.owner,
        "pending": len(pq.pending),
        "in_flight": len(pq.in_flight),
    }


def _busiest(grp: ConsumerGroup) -> Iterable[PartitionQueue]:
    """Every partition of the group, or the STATS_PARTITIONS busiest when it has more
    (then idle ones fill the list up): the time it takes follows the partitions holding
    events, not the idle ones waiting to be dropped."""
    queues = grp.partitions.values()
    if len(queues) <= STATS_PARTITIONS:
        return queues
    busiest = heapq.nlargest(STATS_PARTITIONS, grp.holding(), key=_events_held)
    if len(busiest) < STATS_PARTITIONS:
        listed = {pq.key for pq in busiest}
        idle = (pq for pq in queues if pq.key not in listed)
        busiest += islice(idle, STATS_PARTITIONS - len(busiest))
    return busiest


def _events_held(pq: PartitionQueue) -> int:
    return len(pq.pending) + len(pq.in_flight)


def member_stats(m: Member, now: float) -> dict[str, Any]:
    return {
        "id": m.member_id,
        "mode": "pull" if m.pull else "push",
        "active": m.active,
        "inactive_reason": m.inactive_reason,
        "partitions": len(m.partitions),
        "queued": m.queued,
        "in_flight": m.in_flight,
        "window": m.window.limit(),
        "delivered": m.delivered,
        "batches": m.batches,
        "acked": m.acked,
        "ack_messages": m.ack_messages,
        "failures": m.failures,
        "small_delays": m.delays.small,
        "long_delays": m.delays.long,
        "offloads": m.offloads,
        "seen_s_ago": round(max(0.0, now - m.last_seen), 3),
        "oldest_in_flight_s": _oldest_in_flight_s(m, now),
    }


def _oldest_in_flight_s(m: Member, now: float) -> float:
    """How long the member has held its oldest unacknowledged event (0: none): a handler
    stuck on one shows here long before ``--handler-timeout`` (session 33's operator
    probe could tell a hung handler from a busy one only by acks not moving)."""
    first = next(iter(m.flights.values()), None)  # delivery order: the oldest first
    return 0.0 if first is None else round(max(0.0, now - first.sent_at), 3)


def dead_letter_rows(core: ChannelCore, max_attempts: int) -> list[dict[str, Any]]:
    """Each dead letter as the event, its group, the error and the failures counted."""
    rows = []
    for letter in core.dead_letters:
        row = dict(letter.event.to_dict(), group=letter.group, error=letter.error)
        del row["attempt"]  # it failed max_attempts times, whatever its last attempt
        row["failures"] = max_attempts
        rows.append(row)
    return rows
