"""EventChannel: the Pyro5-exposed facade over one channel's pure core.

Threads: Pyro5 worker threads call publish / subscribe / unsubscribe / stats; one
:class:`Dispatcher` thread per member pushes batches. ``_lock`` guards the core, the
dispatcher table and the wake-up conditions, which all share it. Pushes happen outside it.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import Pyro5.api
import Pyro5.core
import Pyro5.errors

from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore, ChannelKind
from channel_server.core.group import AckOutcome, Batch, ConsumerGroup
from channel_server.dispatcher import Dispatcher
from channel_server.errors import InvalidArgument, QueueFull, SubscriberIdInUse
from channel_server.events import Event
from channel_server.pull import PULL, PullSide
from channel_server.push import PushSide, answers, check_callback
from channel_server.store.base import DeadLetterRecord, MemberRecord, Store
from channel_server.wire import DEFAULT_GROUP, check_name

log = logging.getLogger(__name__)
MemberKey = tuple[str, str]
"""(group, member id)"""
STOP_TIMEOUT_S = 5.0


class EventChannel(PushSide, PullSide):
    """A named channel: publish events, subscribe push consumers, read its state.

    Only the methods marked ``@expose`` are reachable over RPC; the dispatcher side
    (next_batch, push_done, push_failed) and close are for in-process callers.
    """

    def __init__(
        self,
        name: str,
        config: ChannelConfig,
        store: Store,
        kind: ChannelKind = ChannelKind.QUEUE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._name = name
        self._config = config
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        """Guards _core, _dispatchers, _wakeups, _closed and _trimmed."""
        self._core = ChannelCore(name, config, kind)
        self._wakeups: dict[MemberKey, threading.Condition] = {}
        self._dispatchers: dict[MemberKey, Dispatcher] = {}
        self._waiting: set[MemberKey] = set()
        """Dispatchers waiting on their wake-up condition right now."""
        self._closed = False
        self._trimmed = 0
        """Delivered ids already trimmed from the store's window."""
        self._pulls: dict[MemberKey, Batch | None] = {}
        """The one unacknowledged event of each pull member (handed out by ``get``)."""

    def restore(self) -> int:
        """Load what the store kept (a restart) and resume pushing to the saved members.
        Call once, before the channel is published. Returns the events restored."""
        with _no_gc():  # millions of new objects: no collections until they are all in place
            snapshot = self._store.load(self._name)
        with self._lock:
            with _no_gc():
                self._core.restore(snapshot)
            self._trimmed = self._core.delivered.expired_total
            for grp in self._core.groups.values():
                self._store.save_group(self._name, grp.name, grp.created_offset)
                for member in grp.members.values():
                    if member.callback != PULL:
                        self._start_dispatcher(
                            grp.name, member.member_id, member.session, member.callback
                        )
            self._persist_owners()
            self._wake_ready()
        if snapshot.events or snapshot.members:
            log.info(
                "%s: restored %d unacknowledged events, %d members, %d dead letters",
                self._name,
                len(snapshot.events),
                len(snapshot.members),
                len(snapshot.dead_letters),
            )
        return len(snapshot.events)

    @Pyro5.api.expose
    @property
    def name(self) -> str:
        return self._name

    @Pyro5.api.expose
    def ping(self) -> str:
        """Liveness check for clients; returns the channel name."""
        return self._name

    # -- publishing ----------------------------------------------------------------------
    @Pyro5.api.expose
    def publish(self, batch: Any) -> dict[str, Any]:
        """Store and enqueue a batch. Returns accepted / duplicates / refused / unrouted.

        Raises InvalidEvent (nothing stored) or QueueFull (the front of the batch that fit
        was stored; the exception says how much).
        """
        with self._lock:
            self._check_queues()  # publishing halts here while lost events are rebuilt
            outcome = self._core.prepare(batch)
            if outcome.accepted:
                self._accept(outcome.accepted)
        if outcome.refused:
            raise QueueFull(
                self._name,
                self._config.capacity,
                accepted=len(outcome.accepted),
                refused_ids=outcome.refused,
                duplicates=outcome.duplicates,
                retry_after_s=self._config.queue_full_retry_s,
            )
        return outcome.summary()

    def _accept(self, events: list[Event]) -> None:
        """Commit prepared events to the store, then queue them (under the lock). The
        commit stays under the lock on purpose: SQLite lets go of the GIL for it, and
        dispatchers blocked on the lock do not compete for the GIL when the publish wants
        it back (measured: slightly faster than committing outside the lock)."""
        now = self._clock()
        self._store.append(self._name, events, self._core.next_offset, now)
        self._core.enqueue(events, now)
        self._trim_delivered()
        self._persist_owners()
        self._wake_ready()

    # -- subscriptions -------------------------------------------------------------------
    @Pyro5.api.expose
    def subscribe(
        self,
        subscriber_id: str,
        callback: str | None = None,
        group: str | None = None,
        prefetch: int | None = None,
    ) -> dict[str, Any]:
        """Join (or resume: it is idempotent) a group as a push subscriber reached at
        ``callback``, or as a pull subscriber (``get``) without one. The group defaults to
        ``default`` on a queue and to a group of the subscriber's own on a topic."""
        check_name("subscriber_id", subscriber_id)
        group = self._group_of(subscriber_id, group)
        callback = PULL if callback is None else check_callback(callback)
        prefetch = 1 if callback == PULL else self._check_prefetch(prefetch)
        claimed_by = self._active_elsewhere(group, subscriber_id, callback)
        if claimed_by and answers(claimed_by, self._config.liveness_timeout_s):
            raise SubscriberIdInUse(subscriber_id, group)
        with self._lock:
            self._check_queues()
            grp = self._add_group(group)
            existing = grp.members.get(subscriber_id)
            if existing and existing.active and existing.callback != callback:
                if existing.callback != claimed_by:  # claimed again meanwhile
                    raise SubscriberIdInUse(subscriber_id, group)
                log.warning(
                    "%s: %s resubscribed from %s; its old session at %s does not answer",
                    self._name,
                    subscriber_id,
                    callback,
                    existing.callback,
                )
                grp.deactivate(subscriber_id)
            member = grp.join(subscriber_id, callback, prefetch)
            self._store.save_member(
                MemberRecord(self._name, group, subscriber_id, callback, prefetch)
            )
            if callback != PULL:
                self._start_dispatcher(group, subscriber_id, member.session, callback)
            self._persist_owners()
            self._wake_ready()
            partitions = sorted(member.partitions, key=str)
        mode = "pull" if callback == PULL else "push"
        log.info(
            "%s: %s joined group %s (%s, prefetch %d)",
            self._name,
            subscriber_id,
            group,
            mode,
            prefetch,
        )
        return {
            "channel": self._name,
            "kind": self._core.kind.value,
            "group": group,
            "subscriber_id": subscriber_id,
            "mode": mode,
            "prefetch": prefetch,
            "partitions": [list(key) for key in partitions],
        }

    def _group_of(self, subscriber_id: str, group: str | None) -> str:
        if group is None:
            return self._core.default_group_for(subscriber_id)
        return check_name("group", group)

    def _add_group(self, group: str) -> ConsumerGroup:
        if group not in self._core.groups:
            grp = self._core.add_group(group)
            self._store.save_group(self._name, group, grp.created_offset)
        return self._core.groups[group]

    def _active_elsewhere(self, group: str, subscriber_id: str, callback: str) -> str | None:
        """The callback of an active member with this id at another address, if any."""
        with self._lock:
            grp = self._core.groups.get(group)
            member = grp.members.get(subscriber_id) if grp else None
            if member and member.active and member.callback != callback:
                return member.callback
        return None

    @Pyro5.api.expose
    def unsubscribe(self, subscriber_id: str, group: str | None = None) -> bool:
        """Leave the group (idempotent: False if not a member). In ``default`` its
        partitions go back to the pool; the last member of another group takes the group
        and its backlog with it."""
        check_name("subscriber_id", subscriber_id)
        group = self._group_of(subscriber_id, group)
        with self._lock:
            grp = self._core.groups.get(group)
            if grp is None or subscriber_id not in grp.members:
                return False
            self._pulls.pop((group, subscriber_id), None)
            grp.leave(subscriber_id)
            self._store.remove_member(self._name, group, subscriber_id)
            if group != DEFAULT_GROUP and not grp.members:
                self._drop_group(group)
            self._persist_owners()
            self._wake_all()
        log.info("%s: %s left group %s", self._name, subscriber_id, group)
        return True

    def _drop_group(self, group: str) -> None:
        gone = self._core.drop_group(group)
        self._store.remove_group(self._name, group)
        if gone:
            self._store.delete(self._name, self._store.offsets(gone))
        log.info("%s: group %s dropped with %d events only it held", self._name, group, len(gone))

    def _check_prefetch(self, prefetch: Any) -> int:
        if prefetch is None:
            return self._config.default_prefetch
        if type(prefetch) is not int or not 1 <= prefetch <= self._config.max_prefetch:
            raise InvalidArgument("prefetch", f"must be an integer 1-{self._config.max_prefetch}")
        return prefetch

    def _persist_owners(self) -> None:
        for grp in self._core.groups.values():
            if changes := grp.take_owner_changes():
                self._store.save_owners(self._name, grp.name, changes)

    def _persist_outcome(self, group: str, outcome: AckOutcome, retired: list[Event]) -> None:
        if outcome.dead:
            letters = [DeadLetterRecord(group, ev, error) for ev, error in outcome.dead]
            self._store.add_dead_letters(self._name, letters)
        gone = {ev.offset for ev in retired}
        kept = [ev.offset for ev in outcome.done if ev.offset not in gone]
        if kept:
            self._store.ack(self._name, group, kept)
        if gone:
            self._store.delete(self._name, sorted(gone))

    def _trim_delivered(self) -> None:
        expired = self._core.delivered.expired_total - self._trimmed
        if expired:
            self._store.trim_delivered(self._name, expired)
            self._trimmed += expired

    def _check_queues(self) -> None:
        """The invariant of DESIGN §7: accepted - acknowledged = queued + in flight. When
        it breaks (kill_queues), rebuild the queues from the backup before going on."""
        lost = self._core.lost()
        if not lost:
            return
        log.warning(
            "%s: the queues lost %d events (accepted - acknowledged != queued + "
            "in flight): publishing halted, rebuilding from the backup",
            self._name,
            lost,
        )
        refilled = self._core.rebuild(self._store.load(self._name))
        log.warning(
            "%s: rebuilt %d events in timestamp order; publishing resumed", self._name, refilled
        )
        self._wake_all()

    def kill_queues(self) -> int:
        """The fault of DESIGN §8: empty the in-memory queues and say nothing. The channel
        notices by its invariant (on the next publish, subscribe or housekeeping round)."""
        with self._lock:
            dropped = self._core.kill_queues()
        log.warning(
            "%s: fault kill_queues fired: %d queued events dropped from memory", self._name, dropped
        )
        return dropped

    def _wake_ready(self) -> None:
        """Notify the waiting dispatchers that have a partition ready to send."""
        for name, member_id in list(self._waiting):
            grp = self._core.groups.get(name)
            if grp is not None and grp.has_ready(member_id):
                self._wakeups[(name, member_id)].notify()

    def _wake_all(self) -> None:
        for wakeup in self._wakeups.values():
            wakeup.notify_all()

    # -- visibility and life cycle -------------------------------------------------------
    @Pyro5.api.expose
    def stats(self) -> dict[str, Any]:
        """A JSON-friendly snapshot: counters, groups, members and partitions. ``stored``
        is counted after the rest, outside the channel lock (the first count of a durable
        store reads its rows)."""
        with self._lock:
            core = self._core
            stats = {
                "name": self._name,
                "kind": core.kind.value,
                "capacity": self._config.capacity,
                "unacked": core.unacked,
                "accepted": core.accepted_total,
                "acked": core.acked_total,
                "dead_letters": len(core.dead_letters),
                "durable": self._store.durable,
                "groups": {name: _group_stats(grp) for name, grp in core.groups.items()},
            }
        stats["stored"] = self._store.count(self._name)
        return stats

    @Pyro5.api.expose
    def dead_letters(self) -> list[dict[str, Any]]:
        """The dead-letter queue: events whose handler failed ``max_attempts`` times."""
        with self._lock:
            letters = [
                dict(d.event.to_dict(), group=d.group, error=d.error)
                for d in self._core.dead_letters
            ]
        for letter in letters:  # it failed max_attempts times, whatever its last attempt
            del letter["attempt"]
            letter["failures"] = self._config.max_attempts
        return letters

    @Pyro5.api.expose
    def replay_dead_letters(self, ids: list[str] | None = None) -> int:
        """Queue dead letters (all, or these ids) for delivery again; returns how many."""
        if ids is not None and (not isinstance(ids, list) or not all(type(i) is str for i in ids)):
            raise InvalidArgument("ids", "must be a list of event ids")
        with self._lock:
            chosen, restored = self._core.replay(None if ids is None else set(ids))
            if restored:
                self._store.reinsert(self._name, restored, self._clock())
            for letter in chosen:
                self._store.remove_dead_letters(self._name, letter.group, [letter.event.offset])
            self._wake_ready()
        log.info("%s: replaying %d dead letters", self._name, len(chosen))
        return len(chosen)

    def close(self) -> None:
        """Stop every dispatcher (after its current push) and wait for them."""
        with self._lock:
            self._closed = True
            dispatchers = list(self._dispatchers.values())
            for dispatcher in dispatchers:
                dispatcher.stop()
            self._wake_all()
        for dispatcher in dispatchers:
            dispatcher.join(STOP_TIMEOUT_S)


@contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _group_stats(grp: ConsumerGroup) -> dict[str, Any]:
    return {
        "backlog": grp.backlog,
        "members": [
            {
                "id": m.member_id,
                "active": m.active,
                "partitions": len(m.partitions),
                "queued": m.queued,
                "in_flight": m.in_flight,
                "delivered": m.delivered,
                "acked": m.acked,
                "failures": m.failures,
                "small_delays": m.delays.small,
                "long_delays": m.delays.long,
            }
            for m in sorted(grp.members.values(), key=lambda m: m.member_id)
        ],
        "partitions": [
            {
                "publisher_id": pq.key[0],
                "partition": pq.key[1],
                "owner": pq.owner,
                "pending": len(pq.pending),
                "in_flight": len(pq.in_flight),
            }
            for pq in grp.partitions.values()
        ],
    }
