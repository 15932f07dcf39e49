"""EventChannel: the Pyro5-exposed facade over one channel's pure core.

Threads: Pyro5 worker threads call publish / subscribe / unsubscribe / stats; one
:class:`Dispatcher` thread per member pushes batches. ``_lock`` guards the core, the
dispatcher table and the wake-up conditions, which all share it. Pushes happen outside it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import Pyro5.api
import Pyro5.core
import Pyro5.errors

from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore, ChannelKind
from channel_server.core.group import AckOutcome, Batch, ConsumerGroup
from channel_server.core.health import Delay
from channel_server.dispatcher import Dispatcher, DispatchStopped
from channel_server.errors import InvalidArgument, NotSubscribed, QueueFull, SubscriberIdInUse
from channel_server.events import Event
from channel_server.store.base import DeadLetterRecord, MemberRecord, Store
from channel_server.wire import DEFAULT_GROUP, check_name, make_proxy

log = logging.getLogger(__name__)
MemberKey = tuple[str, str]
"""(group, member id)"""
STOP_TIMEOUT_S = 5.0
PULL = ""
"""The callback of a pull member: it has none, it calls ``get``."""


class EventChannel:
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
        """Guards _core, _dispatchers, _wakeups and _closed."""
        self._core = ChannelCore(name, config, kind)
        self._wakeups: dict[MemberKey, threading.Condition] = {}
        self._dispatchers: dict[MemberKey, Dispatcher] = {}
        self._closed = False
        self._trimmed = 0
        """Delivered ids already trimmed from the store's window."""
        self._pulls: dict[MemberKey, Batch | None] = {}
        """The one unacknowledged event of each pull member (handed out by ``get``)."""

    def restore(self) -> int:
        """Load what the store kept (a restart) and resume pushing to the saved members.
        Call once, before the channel is published. Returns the events restored."""
        snapshot = self._store.load(self._name)
        with self._lock:
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
                now = self._clock()
                self._store.append(self._name, outcome.accepted, self._core.next_offset, now)
                self._core.enqueue(outcome.accepted, now)
                self._trim_delivered()
                self._persist_owners()
                self._wake_ready()
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
        callback = PULL if callback is None else _check_callback(callback)
        prefetch = 1 if callback == PULL else self._check_prefetch(prefetch)
        claimed_by = self._active_elsewhere(group, subscriber_id, callback)
        if claimed_by and _answers(claimed_by, self._config.liveness_timeout_s):
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

    # -- pull mode -----------------------------------------------------------------------
    @Pyro5.api.expose
    def get(
        self, subscriber_id: str, last_id: str | None = None, group: str | None = None
    ) -> dict[str, Any]:
        """The classic exactly-once get. ``last_id`` (the id the client got last) is
        acknowledged and the next event returned; a retried get with the same ``last_id``
        returns the same event again. Answers ``{"status": "message", "event": {...}}`` or
        ``{"status": "empty"}``; raises NotSubscribed."""
        check_name("subscriber_id", subscriber_id)
        group = self._group_of(subscriber_id, group)
        if last_id is not None and (type(last_id) is not str or not last_id):
            raise InvalidArgument("last_id", "must be an event id string or None")
        with self._lock:
            grp = self._core.groups.get(group)
            if grp is None or subscriber_id not in grp.members:
                raise NotSubscribed(subscriber_id, self._name)
            self._check_queues()
            key = (group, subscriber_id)
            batch = self._pulls.get(key)
            if last_id is not None and batch is None:  # got before a broker restart
                batch = grp.take_event(subscriber_id, last_id)
            if batch is not None and batch.events[0].id == last_id:
                outcome, retired = self._core.complete(grp, batch, {last_id}, {})
                self._persist_outcome(group, outcome, retired)
                batch = None
            if batch is None:
                batch = grp.take_batch(subscriber_id)
            self._pulls[key] = batch
            self._persist_owners()
        if batch is None:
            return {"status": "empty"}
        return {"status": "message", "event": batch.to_wire()[0]}

    @Pyro5.api.expose
    def memberships(self, subscriber_id: str) -> list[dict[str, Any]]:
        """The groups of this channel the subscriber belongs to."""
        check_name("subscriber_id", subscriber_id)
        with self._lock:
            return [
                {
                    "channel": self._name,
                    "kind": self._core.kind.value,
                    "group": name,
                    "mode": "pull" if grp.members[subscriber_id].callback == PULL else "push",
                }
                for name, grp in self._core.groups.items()
                if subscriber_id in grp.members
            ]

    def _check_prefetch(self, prefetch: Any) -> int:
        if prefetch is None:
            return self._config.default_prefetch
        if type(prefetch) is not int or not 1 <= prefetch <= self._config.max_prefetch:
            raise InvalidArgument("prefetch", f"must be an integer 1-{self._config.max_prefetch}")
        return prefetch

    def _start_dispatcher(self, group: str, member_id: str, session: int, callback: str) -> None:
        key = (group, member_id)
        self._wakeups.setdefault(key, threading.Condition(self._lock))
        old = self._dispatchers.get(key)
        if old is not None:
            old.stop()  # it notices the new session and ends after its current push
        dispatcher = Dispatcher(self, self._name, group, member_id, session, callback, self._config)
        self._dispatchers[key] = dispatcher
        dispatcher.start()

    # -- the dispatchers' side (BatchSource) ---------------------------------------------
    def next_batch(self, group: str, member_id: str, session: int) -> Batch | None:
        deadline = time.monotonic() + self._config.dispatch_wait_s
        with self._lock:
            wakeup = self._wakeups[(group, member_id)]
            while True:
                grp = self._live_group(group, member_id, session)
                batch = grp.take_batch(member_id)
                if batch is not None:
                    return batch
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._housekeep(grp)
                    return None
                wakeup.wait(remaining)

    def _live_group(self, group: str, member_id: str, session: int) -> ConsumerGroup:
        grp = self._core.groups.get(group)
        member = grp.members.get(member_id) if grp else None
        if self._closed or member is None or member.session != session or not member.active:
            raise DispatchStopped
        return grp

    def push_done(self, group: str, batch: Batch, reply: Any, elapsed_s: float) -> None:
        acked, nacked = _parse_reply(reply)
        with self._lock:
            grp = self._core.groups[group]
            outcome, retired = self._core.complete(grp, batch, acked, nacked)
            self._persist_outcome(group, outcome, retired)
            self._observe_delay(grp, batch.member_id, elapsed_s)
            self._persist_owners()
            self._wake_ready()
        if outcome.missing:
            log.warning(
                "%s: %s left %d of %d events unacknowledged; they will be redelivered%s",
                self._name,
                batch.member_id,
                outcome.missing,
                len(batch.events),
                "; member marked inactive" if outcome.deactivated else "",
            )
        for ev, error in outcome.dead:
            log.warning(
                "%s: %s dead-lettered after %d failures: %s",
                self._name,
                ev.id,
                self._config.max_attempts,
                error,
            )

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

    def _observe_delay(self, grp: ConsumerGroup, member_id: str, elapsed_s: float) -> None:
        member = grp.members.get(member_id)
        if member is None:
            return
        delay, offload = member.delays.observe(elapsed_s, self._clock())
        if delay is not Delay.NONE:
            log.info("%s: %s delay from %s: %.3f s", self._name, delay, member_id, elapsed_s)
        if offload and member.active:
            moved = grp.offload(member_id)
            log.warning(
                "%s: %d long delays of %s within %g s: moved %d queued partitions to others",
                self._name,
                self._config.long_delay_count,
                member_id,
                self._config.long_delay_window_s,
                len(moved),
            )

    def push_failed(self, group: str, batch: Batch, error: Exception) -> bool:
        with self._lock:
            gave_up = self._core.groups[group].fail(batch)
            self._persist_owners()
            self._wake_ready()
        log.warning(
            "%s: push of %d events to %s failed: %s%s",
            self._name,
            len(batch.events),
            batch.member_id,
            error,
            "; member marked inactive" if gave_up else "",
        )
        return gave_up

    def _housekeep(self, grp: ConsumerGroup) -> None:
        self._check_queues()
        for key in grp.sweep_idle(self._clock(), self._config.partition_idle_s):
            log.debug("%s: dropped idle partition %s", self._name, key)
        self._core.delivered.expire(self._clock())
        self._trim_delivered()
        self._persist_owners()

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
        for name, grp in self._core.groups.items():
            for member_id in grp.ready_members():
                if wakeup := self._wakeups.get((name, member_id)):  # pull members have none
                    wakeup.notify()

    def _wake_all(self) -> None:
        for wakeup in self._wakeups.values():
            wakeup.notify_all()

    # -- visibility and life cycle -------------------------------------------------------
    @Pyro5.api.expose
    def stats(self) -> dict[str, Any]:
        """A JSON-friendly snapshot: counters, groups, members and partitions."""
        with self._lock:
            core = self._core
            return {
                "name": self._name,
                "kind": core.kind.value,
                "capacity": self._config.capacity,
                "unacked": core.unacked,
                "accepted": core.accepted_total,
                "acked": core.acked_total,
                "dead_letters": len(core.dead_letters),
                "stored": self._store.count(self._name),
                "durable": self._store.durable,
                "groups": {name: _group_stats(grp) for name, grp in core.groups.items()},
            }

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
                self._store.reinsert(self._name, restored)
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


def _check_callback(callback: Any) -> str:
    if isinstance(callback, Pyro5.core.URI):
        return str(callback)
    if type(callback) is not str:
        raise InvalidArgument("callback", "must be a PYRO: URI string")
    try:
        uri = Pyro5.core.URI(callback)
    except Pyro5.errors.PyroError as exc:
        raise InvalidArgument("callback", f"not a Pyro URI: {exc}") from None
    if uri.protocol != "PYRO":
        raise InvalidArgument("callback", "must be a direct PYRO: URI")
    return callback


def _answers(callback: str, timeout_s: float) -> bool:
    """Whether a subscriber's callback object still answers a ping."""
    try:
        with make_proxy(callback, timeout_s) as proxy:
            proxy.ping()
    except Exception:
        return False
    return True


def _parse_reply(reply: Any) -> tuple[set[str], dict[str, str]]:
    """A subscriber's reply, ``{"acked": [ids], "nacked": {id: error}}``; anything malformed
    acknowledges nothing (so everything is redelivered)."""
    if not isinstance(reply, dict):
        return set(), {}
    acked = reply.get("acked", [])
    nacked = reply.get("nacked", {})
    acked_ids = {i for i in acked if type(i) is str} if isinstance(acked, list) else set()
    nacked_ids = {str(k): str(v) for k, v in nacked.items()} if isinstance(nacked, dict) else {}
    return acked_ids, nacked_ids


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
