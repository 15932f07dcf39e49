"""EventChannel: the Pyro5-exposed facade over one channel's pure core.

It validates arguments (:mod:`boundary`) and runs each call under its lock over parts that
own their state: the core (pure), the backup (:mod:`backup`), the push side
(:mod:`push`), the liveness judge (:mod:`liveness`) and the pull ``get`` (:mod:`pull`).

Threads: Pyro5 worker threads call the exposed methods; the broker's dispatch pool runs
this channel's pushes, pings and housekeeping. Lock order: the channel's ``lock`` first,
then the store's and the pool's own locks, which never call back. ``lock`` guards the
core and every part's state, and ``_closed``; no RPC is made while holding it.
"""

from __future__ import annotations

import gc
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import Pyro5.api
from Pyro5.callcontext import current_context

from channel_server import boundary, pull
from channel_server.access import Access
from channel_server.backup import ChannelBackup
from channel_server.channel_stats import RateWindow, channel_stats, dead_letter_rows
from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore, ChannelKind
from channel_server.core.group import AckOutcome, ConsumerGroup
from channel_server.core.member import PULL_CALLBACK, Flight, Member
from channel_server.dispatch import DispatchPool, answers, wire_fault
from channel_server.errors import NotSubscribed, QueueFull, SubscriberIdInUse
from channel_server.events import Event, IdScope
from channel_server.liveness import Liveness
from channel_server.push import PushDelivery
from channel_server.store.base import MemberRecord, Store
from channel_server.strict_calls import checked_arity
from channel_server.users import Action
from channel_server.wire import DEFAULT_GROUP

log = logging.getLogger(__name__)
SESSION_SEED_SCALE = 1_000_000
"""Sessions start at the clock in microseconds: each life of a channel uses new ones."""


@checked_arity
class EventChannel:
    """A named channel: publish events, subscribe consumers, acknowledge, read its state.

    Only the methods marked ``@expose`` are reachable over RPC; ``restore``,
    ``housekeep``, ``kill_queues`` and ``close`` are for the broker, and ``lock``,
    ``core``, ``now`` and ``after_change`` for the channel's own parts.
    """

    def __init__(
        self,
        name: str,
        config: ChannelConfig,
        store: Store,
        pool: DispatchPool,
        access: Access | None = None,
        kind: ChannelKind = ChannelKind.QUEUE,
        clock: Callable[[], float] = time.time,
        id_scope: IdScope = IdScope.PUBLISHER,
    ) -> None:
        """``access``: who may do what (default: a judge for in-process callers only);
        ``id_scope``: where event ids must be unique (fixed when the channel is created)."""
        self._name = name
        self.config = config
        self._store = store
        self._access = access or Access(secrets.token_urlsafe())
        self.now = clock
        self.lock = threading.Lock()
        first_session = int(clock() * SESSION_SEED_SCALE)
        self.core = ChannelCore(name, config, kind, first_session, id_scope)
        self._backup = ChannelBackup(name, store, self.core)
        self._push = PushDelivery(self, pool)
        self._liveness = Liveness(self.core, config, self._push)
        self._rates = RateWindow(config.rate_window_s)
        self._closed = False

    def restore(self) -> int:
        """Load what the store kept (a restart) and resume pushing to the saved members.
        Call once, before the channel is published. Returns the events restored."""
        with _no_gc():  # millions of new objects: no collections until they are all in place
            snapshot = self._store.load(self._name)
        with self.lock:
            with _no_gc():
                self.core.restore(snapshot, self.now())
            self._backup.restored()
            for grp in self.core.groups.values():
                self._store.save_group(self._name, grp.name, grp.created_offset)
                for member in grp.members.values():
                    if not member.pull:
                        key = (grp.name, member.member_id)
                        self._push.member_joined(key, member.callback, member.secret)
            self.after_change()
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

    @property
    def id_scope(self) -> IdScope:
        """Where its event ids must be unique (fixed at creation)."""
        return self.core.id_scope

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
        self._access.require(Action.PUBLISH, self._name)
        with self.lock:
            self._backup.repair()  # publishing halts here while lost events are rebuilt
            outcome = self.core.prepare(batch)
            if outcome.accepted:
                self._accept(outcome.accepted, outcome.keys)
        if outcome.refused:
            by_bytes = outcome.full_by == "bytes"
            raise QueueFull(
                self._name,
                self.config.max_queued_bytes if by_bytes else self.config.capacity,
                accepted=len(outcome.accepted),
                refused_ids=outcome.refused,
                duplicates=outcome.duplicates,
                retry_after_s=self.config.queue_full_retry_s,
                limit=outcome.full_by,
            )
        return outcome.summary()

    def _accept(self, events: list[Event], keys: list[str]) -> None:
        """Commit prepared events to the store, then queue them (under the lock). The
        commit stays under the lock on purpose: SQLite lets go of the GIL for it, and
        threads blocked on the lock do not compete for the GIL when the publish wants it
        back (measured: slightly faster than committing outside the lock)."""
        now = self.now()
        self._backup.accept(events, now)
        self.core.enqueue(events, now, keys)
        self._backup.trim()
        self.after_change()

    # -- subscriptions -------------------------------------------------------------------
    @Pyro5.api.expose
    def subscribe(
        self,
        subscriber_id: str,
        callback: str | None = None,
        group: str | None = None,
        prefetch: int | None = None,
        callback_secret: str | None = None,
    ) -> dict[str, Any]:
        """Join (or resume: it is idempotent) a group as a push subscriber reached at
        ``callback``, or as a pull subscriber (``get``) without one. The group defaults to
        ``default`` on a queue and to a group of the subscriber's own on a topic. A push
        subscriber's callback daemon admits only whoever presents ``callback_secret``: this
        channel. A subscriber id belongs to the user that created it. The callback must
        name the host the call came from, or one of ``callback_hosts``. A new subscriber
        past ``max_members`` takes the place of the member inactive longest, or raises
        LimitReached."""
        boundary.check_name("subscriber_id", subscriber_id)
        group = self._group_of(subscriber_id, group)
        callback = PULL_CALLBACK if callback is None else boundary.check_callback(callback)
        pull = callback == PULL_CALLBACK
        if not pull:
            self._check_callback_host(callback)
        prefetch = 1 if pull else boundary.check_prefetch(prefetch, self.config)
        secret = "" if pull else boundary.check_secret(callback_secret)
        self._access.require(Action.SUBSCRIBE, self._name)
        claimed = self._active_elsewhere(group, subscriber_id, callback)
        if claimed and answers(claimed[0], self.config.liveness_timeout_s, claimed[1]):
            raise SubscriberIdInUse(subscriber_id, group)
        with self.lock:
            self._backup.repair()
            if not self._is_member(group, subscriber_id):
                self._make_room(group)
            grp = self._add_group(group)
            self._may_take(grp, grp.members.get(subscriber_id), callback, claimed)
            user = self._access.current()
            member = grp.join(
                subscriber_id,
                callback,
                prefetch,
                self.core.new_session(),
                self.now(),
                pull,
                user=user.name,
                secret=secret,
            )
            record = MemberRecord(
                self._name, group, subscriber_id, callback, prefetch, user.name, secret
            )
            self._store.save_member(record)
            if not pull:
                self._push.member_joined((group, subscriber_id), callback, secret)
                self._liveness.note((group, subscriber_id))
            self.after_change()
            partitions = sorted(member.partitions, key=str)
        log.info(
            "%s: %s joined group %s (%s, prefetch %d)",
            self._name,
            subscriber_id,
            group,
            "pull" if pull else "push",
            prefetch,
        )
        return {
            "channel": self._name,
            "kind": self.core.kind.value,
            "group": group,
            "subscriber_id": subscriber_id,
            "mode": "pull" if pull else "push",
            "prefetch": prefetch,
            "session": member.session,
            "heartbeat_s": self.config.heartbeat_s,
            "handler_timeout_s": self.config.handler_timeout_s,
            "partitions": [list(key) for key in partitions],
        }

    def _acts_for(self, grp: ConsumerGroup | None, subscriber_id: str) -> bool:
        """Whether the subscriber id is a member of ``grp``; raises NotAuthorized unless
        the caller may subscribe here and the id is its own (or it is an admin)."""
        self._access.require(Action.SUBSCRIBE, self._name)
        member = grp.members.get(subscriber_id) if grp else None
        if member is None:
            return False
        self._access.require_owner(member.user, subscriber_id, self._name)
        return True

    def _group_of(self, subscriber_id: str, group: str | None) -> str:
        if group is None:
            return self.core.default_group_for(subscriber_id)
        return boundary.check_name("group", group)

    def _check_callback_host(self, callback: str) -> None:
        """See boundary.check_callback_host: the connection of the current call, if any."""
        conn, caller = current_context.client, current_context.client_sock_addr
        local = conn.sock.getsockname() if conn is not None and caller is not None else None
        boundary.check_callback_host(callback, caller, self.config.callback_hosts, local)

    def _is_member(self, group: str, subscriber_id: str) -> bool:
        grp = self.core.groups.get(group)
        return grp is not None and subscriber_id in grp.members

    def _make_room(self, joining: str) -> None:
        """Room for a new member of group ``joining`` (see ChannelCore.make_room_for_member);
        raises LimitReached."""
        for group, member_id in self.core.make_room_for_member():
            log.warning(
                "%s: %s (inactive) forgotten to make room for a new member (max %d members)",
                self._name,
                member_id,
                self.config.max_members,
            )
            self._member_gone(group, member_id, keep_group=group == joining)

    def _member_gone(self, group: str, member_id: str, keep_group: bool = False) -> None:
        """After a member left its group (under the lock): close its link, forget its
        subscription, and drop a group other than ``default`` that has no member left
        (unless ``keep_group``: someone is joining it)."""
        self._push.member_left((group, member_id))
        self._store.remove_member(self._name, group, member_id)
        grp = self.core.groups.get(group)  # gone with an earlier member of the same round
        if group != DEFAULT_GROUP and grp is not None and not grp.members and not keep_group:
            self._drop_group(group)

    def _add_group(self, group: str) -> ConsumerGroup:
        if group not in self.core.groups:
            grp = self.core.add_group(group)
            self._store.save_group(self._name, group, grp.created_offset)
        return self.core.groups[group]

    def _active_elsewhere(
        self, group: str, subscriber_id: str, callback: str
    ) -> tuple[str, str] | None:
        """(callback, secret) of an active member with this id at another address, if any;
        NotAuthorized first if the id is another user's."""
        with self.lock:
            grp = self.core.groups.get(group)
            member = grp.members.get(subscriber_id) if grp else None
            if member is None:
                return None
            self._access.require_owner(member.user, subscriber_id, self._name)
            if member.active and member.callback != callback:
                return member.callback, member.secret
        return None

    def _may_take(
        self,
        grp: ConsumerGroup,
        existing: Member | None,
        callback: str,
        claimed: tuple[str, str] | None,
    ) -> None:
        """Refuse to resume a subscriber id of another user, or one claimed meanwhile."""
        if existing is None:
            return
        self._access.require_owner(existing.user, existing.member_id, self._name)
        if existing.active and existing.callback != callback:
            if claimed is None or existing.callback != claimed[0]:  # claimed again meanwhile
                raise SubscriberIdInUse(existing.member_id, grp.name)
            log.warning(
                "%s: %s resubscribed from %s; its old session at %s does not answer",
                self._name,
                existing.member_id,
                callback,
                existing.callback,
            )
        if not existing.active:
            log.warning(
                "%s: %s readmitted (it was inactive: %s)",
                self._name,
                existing.member_id,
                existing.inactive_reason,
            )

    @Pyro5.api.expose
    def unsubscribe(self, subscriber_id: str, group: str | None = None) -> bool:
        """Leave the group (idempotent: False if not a member). What the member held goes
        back to the head of its partitions; in ``default`` its partitions go back to the
        pool; the last member of another group takes the group and its backlog with it."""
        boundary.check_name("subscriber_id", subscriber_id)
        group = self._group_of(subscriber_id, group)
        with self.lock:
            grp = self.core.groups.get(group)
            if not self._acts_for(grp, subscriber_id):
                return False
            grp.leave(subscriber_id)
            self._member_gone(group, subscriber_id)
            self.after_change()
        log.info("%s: %s left group %s", self._name, subscriber_id, group)
        return True

    @Pyro5.api.expose
    def forget(
        self, subscriber_id: str, group: str | None = None, force: bool = False
    ) -> dict[str, Any]:
        """Remove a member now (admin). An inactive one holds and owns nothing; an active
        one is refused with MemberActive unless ``force``, and then leaves as if it
        unsubscribed: what it held goes back to the head of its partitions, and its
        partitions to the others (a subscriber still running subscribes again, as a new
        member, at its next heartbeat). The last member of a group other than
        ``default`` takes the group and its backlog with it, like an unsubscribe.
        Answers what was removed (:class:`~channel_server.core.channel_core.Forgotten`)
        and ``group_dropped``; raises NotSubscribed when there is no such member."""
        boundary.check_name("subscriber_id", subscriber_id)
        group = self._group_of(subscriber_id, group)
        force = boundary.check_flag("force", force)
        self._access.require(Action.ADMIN, self._name)
        with self.lock:
            gone = self.core.forget_member(group, subscriber_id, force)
            self._member_gone(group, subscriber_id)
            self.after_change()
            dropped = group not in self.core.groups
        state = "active" if gone.was_active else f"inactive: {gone.inactive_reason}"
        log.warning("%s: %s forgotten from group %s (%s)", self._name, subscriber_id, group, state)
        return dict(gone.to_dict(), channel=self._name, group_dropped=dropped)

    def _expire_members(self, now: float) -> None:
        """Under the lock: forget the members inactive past ``member_expiry_s``."""
        for group, member_id in self.core.expire_members(now):
            log.warning(
                "%s: %s forgotten from group %s: inactive with no sign of life for %g s",
                self._name,
                member_id,
                group,
                self.config.member_expiry_s,
            )
            self._member_gone(group, member_id)

    def _drop_group(self, group: str) -> None:
        gone = self.core.drop_group(group)
        self._store.remove_group(self._name, group)
        if gone:
            self._store.delete(self._name, self._store.offsets(gone))
        log.info("%s: group %s dropped with %d events only it held", self._name, group, len(gone))

    # -- acknowledgements and liveness ---------------------------------------------------
    @Pyro5.api.expose
    def ack(
        self,
        subscriber_id: str,
        group: str,
        session: int,
        through_seq: int,
        acked: list[str],
        nacked: dict[str, str],
    ) -> dict[str, Any]:
        """A push subscriber reports events its handlers finished, named by uid
        (``publisher_id/id``): ``acked`` ones are done, ``nacked`` ones failed (retried, or
        dead-lettered after ``max_attempts``), and any other event it was given up to
        ``through_seq`` was skipped (redelivered). Answers ``{"status": "ok"}``, or
        ``"stale"`` for a session that is over (whose acks still count for events waiting
        for this member: after a broker restart, say)."""
        boundary.check_name("subscriber_id", subscriber_id)
        boundary.check_name("group", group)
        session, through_seq = (
            boundary.check_seq("session", session),
            boundary.check_seq("through_seq", through_seq),
        )
        acked, nacked = boundary.check_acks(acked, nacked, self.config.max_prefetch)
        with self.lock:
            grp = self.core.groups.get(group)
            if not self._acts_for(grp, subscriber_id):
                return {"status": "stale"}
            outcome, retired = self.core.acknowledge(
                grp, subscriber_id, session, acked, nacked, through_seq, self.now()
            )
            if not outcome.stale:
                self._liveness.note((group, subscriber_id))
            self._settle(group, outcome, retired)
        self._log_outcome(subscriber_id, outcome)
        return {"status": "stale" if outcome.stale else "ok"}

    @Pyro5.api.expose
    def heartbeat(
        self, subscriber_id: str, group: str, session: int, holding: int | None = None
    ) -> dict[str, Any]:
        """A push subscriber says it is alive and learns its standing: ``active``,
        ``moved`` (active in another session: the channel was restored, or the id was
        taken over; ``callback`` says where), ``inactive`` (declared dead: subscribe
        again) or ``unknown`` (not a member). ``holding``: how many events of the session
        it still has to handle or acknowledge; when it holds none, events given to it
        long ago were lost on the way and are delivered again."""
        boundary.check_name("subscriber_id", subscriber_id)
        boundary.check_name("group", group)
        session = boundary.check_seq("session", session)
        if holding is not None:
            holding = boundary.check_seq("holding", holding)
        with self.lock:
            grp = self.core.groups.get(group)
            if not self._acts_for(grp, subscriber_id):
                return {"status": "unknown"}
            member = grp.heartbeat(subscriber_id, self.now())
            self._liveness.note((group, subscriber_id))
            if not member.active:
                return {"status": "inactive", "reason": member.inactive_reason}
            if member.session != session:
                return {"status": "moved", "session": member.session, "callback": member.callback}
            if holding == 0 and member.flights:
                self._reclaim(grp, subscriber_id)
        return {"status": "active"}

    def _reclaim(self, grp: ConsumerGroup, subscriber_id: str) -> None:
        """The member holds none of what it was given before the last ack timeout."""
        lost = grp.reclaim(subscriber_id, self.now() - self.config.ack_timeout_s)
        if lost:
            log.warning(
                "%s: %s holds none of %d events it was given; they are delivered again",
                self._name,
                subscriber_id,
                lost,
            )
            self.after_change()

    def _settle(self, group: str, outcome: AckOutcome, retired: list[Event]) -> None:
        """Under the lock: write what an ack (or a burial) did to the backup, and wake
        the members that may have work now."""
        self._backup.outcome(group, outcome, retired)
        self.after_change()

    def bury(
        self, grp: ConsumerGroup, member_id: str, session: int, seqs: range, faults: dict[str, str]
    ) -> None:
        """Under the lock: a delivery to the member (its ``seqs``) holds events that cannot
        cross the wire (uid -> why). They go to the dead-letter queue, not counted against
        the member; the rest of the delivery goes back to be sent again."""
        outcome, retired = self.core.bury_unpushable(grp, member_id, session, seqs, faults)
        self._settle(grp.name, outcome, retired)
        for ev, error in outcome.dead:
            log.warning("%s: %s dead-lettered: %s", self._name, ev.id, error)

    def _log_outcome(self, member_id: str, outcome: AckOutcome) -> None:
        if outcome.missing:
            log.warning(
                "%s: %s skipped the acks of %d events; they will be redelivered",
                self._name,
                member_id,
                outcome.missing,
            )
        for ev, error in outcome.dead:
            log.warning(
                "%s: %s dead-lettered after %d failures: %s",
                self._name,
                ev.id,
                self.config.max_attempts,
                error,
            )

    # -- pull ----------------------------------------------------------------------------
    @Pyro5.api.expose
    def get(
        self, subscriber_id: str, last_uid: str | None = None, group: str | None = None
    ) -> dict[str, Any]:
        """The classic exactly-once get. ``last_uid`` (``publisher_id/id`` of the event the
        client got last) is acknowledged and the next event returned; a retried get with
        the same ``last_uid`` returns the same event again. Answers ``{"status":
        "message", "event": {...}}`` or ``{"status": "empty"}``; raises NotSubscribed. A
        member timed out for not calling ``get`` is readmitted by its next one."""
        boundary.check_name("subscriber_id", subscriber_id)
        group = self._group_of(subscriber_id, group)
        last_uid = boundary.check_last_uid(last_uid)
        with self.lock:
            grp = self.core.groups.get(group)
            if not self._acts_for(grp, subscriber_id):
                raise NotSubscribed(subscriber_id, self._name)
            self._backup.repair()
            flight = pull.next_message(
                self.core, self._backup, grp, subscriber_id, last_uid, self.now()
            )
            while flight is not None and (fault := wire_fault(self._message(flight))):
                session = grp.members[subscriber_id].session
                seqs = range(flight.seq, flight.seq + 1)
                self.bury(grp, subscriber_id, session, seqs, {flight.event.uid: fault})
                flight = pull.next_message(
                    self.core, self._backup, grp, subscriber_id, None, self.now()
                )
            self.after_change()
        if flight is None:
            return {"status": "empty"}
        return self._message(flight)

    @staticmethod
    def _message(flight: Flight) -> dict[str, Any]:
        return {"status": "message", "event": flight.event.to_dict(flight.attempt)}

    @Pyro5.api.expose
    def memberships(self, subscriber_id: str) -> list[dict[str, Any]]:
        """The groups of this channel the subscriber belongs to."""
        boundary.check_name("subscriber_id", subscriber_id)
        self._access.require(Action.SUBSCRIBE, self._name)
        with self.lock:
            return [
                {
                    "channel": self._name,
                    "kind": self.core.kind.value,
                    "group": name,
                    "mode": "pull" if grp.members[subscriber_id].pull else "push",
                }
                for name, grp in self.core.groups.items()
                if subscriber_id in grp.members
            ]

    def connection_closed(self, conn_id: int) -> None:
        """A client connection closed (the broker's daemon says): see Liveness.closed."""
        with self.lock:
            self._liveness.closed(conn_id)

    # -- the parts' side -----------------------------------------------------------------
    def after_change(self) -> None:
        """After any change, under the lock: log members made inactive, persist ownership,
        and wake the push members that may have work now."""
        for grp in self.core.groups.values():
            for member_id, reason in grp.deactivations:
                log.warning("%s: %s marked inactive (%s)", self._name, member_id, reason)
            grp.deactivations.clear()
            for member_id, moved in grp.offloads:
                log.warning(
                    "%s: moved %d queued partitions of slow %s to others",
                    self._name,
                    moved,
                    member_id,
                )
            grp.offloads.clear()
            if changes := grp.take_owner_changes():
                self._backup.owners(grp.name, changes)
            for member_id in grp.touched:
                self._push.wake((grp.name, member_id))
            grp.touched.clear()

    def housekeep(self) -> None:
        """The broker's periodic round: ping silent members holding events, time out
        stuck handlers and quiet pull members, forget members inactive too long, drop
        idle partitions, expire the dedupe window, check the queues' invariant, and
        sample the counts for the rates ``stats`` reports."""
        with self.lock:
            if self._closed:
                return
            now = self.now()
            self._backup.repair()
            self._liveness.round(now)
            self._expire_members(now)
            self._backup.trim()
            self._rates.sample(now, self.core.accepted_total, self.core.acked_total)
            self.after_change()

    def kill_queues(self) -> int:
        """The fault of DESIGN §8: empty the in-memory queues and say nothing. The channel
        notices by its invariant (on the next publish, subscribe or housekeeping round)."""
        with self.lock:
            dropped = self.core.kill_queues()
        log.warning(
            "%s: fault kill_queues fired: %d queued events dropped from memory", self._name, dropped
        )
        return dropped

    # -- visibility and life cycle -------------------------------------------------------
    @Pyro5.api.expose
    def stats(self) -> dict[str, Any]:
        """A JSON-friendly snapshot: counters, groups, members and partitions. ``stored``
        is counted after the rest, outside the channel lock."""
        self._access.require_any(self._name)
        with self.lock:
            durable = self._store.durable
            stats = channel_stats(self.core, self.config, durable, self.now(), self._rates)
        stats["stored"] = self._store.count(self._name)
        return stats

    @Pyro5.api.expose
    def outstanding(self, publisher_id: str) -> dict[str, int]:
        """How much of ``publisher_id``'s accepted work is not done yet: ``outstanding``
        deliveries (``queued`` + ``in_flight``; 0: every event was acknowledged or
        dead-lettered) and its ``dead_letters``. What ``Publisher.wait`` polls. Queues
        that lost events (kill_queues) are rebuilt first, so none is missed."""
        boundary.check_name("publisher_id", publisher_id)
        self._access.require(Action.PUBLISH, self._name)
        with self.lock:
            if self._backup.repair():
                self.after_change()  # wake the members the rebuilt queues have work for
            return self.core.outstanding(publisher_id).to_dict()

    @Pyro5.api.expose
    def dead_letters(self) -> list[dict[str, Any]]:
        """The dead-letter queue: events whose handler failed ``max_attempts`` times."""
        self._access.require(Action.ADMIN, self._name)
        with self.lock:
            return dead_letter_rows(self.core, self.config.max_attempts)

    @Pyro5.api.expose
    def replay_dead_letters(self, ids: list[str] | None = None) -> int:
        """Queue dead letters (all, or those with these ids or uids ``publisher_id/id``)
        for delivery again; returns how many."""
        ids = boundary.check_id_list("ids", ids)
        self._access.require(Action.ADMIN, self._name)
        with self.lock:
            chosen, restored = self.core.replay(None if ids is None else set(ids))
            if restored:
                self._store.reinsert(self._name, restored, self.now())
            for letter in chosen:
                self._store.remove_dead_letters(self._name, letter.group, [letter.event.offset])
            self.after_change()
        log.info("%s: replaying %d dead letters", self._name, len(chosen))
        return len(chosen)

    def close(self) -> None:
        """Stop pushing and close the links to the push members."""
        with self.lock:
            self._closed = True
            links = self._push.detach()
        for link in links:
            link.close()


@contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
