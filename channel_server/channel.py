"""EventChannel: the Pyro5-exposed facade over one channel's parts.

The exposed methods are the channel's RPC surface: each checks its arguments
(:mod:`boundary`) and the caller's permission, then delegates to the part that does the
work. The parts own their state and share only :class:`ChannelState` (the name, config,
pure core, clock, and the channel lock, whose rule is written where it is born):

- :mod:`publishing`: validate (outside the lock), store and queue a batch;
- :mod:`membership`: subscribe, unsubscribe, forget, expire, who may act for a member;
- :mod:`acking`: acks and heartbeats of push members;
- :mod:`pull`: the exactly-once ``get``;
- :mod:`push`: links to push members, pushes and pings on the dispatch pool;
- :mod:`liveness`: connections, timeouts and pings of silent members;
- :mod:`dead_letters`, :mod:`channel_stats`: what operators read and replay;
- :mod:`backup`, :mod:`outcomes`: every store write, the invariant, the core's notices;
- :mod:`upkeep`: restore, the housekeeping round, the fault, close (the broker's side).

Threads: Pyro5 worker threads call the exposed methods; the broker's dispatch pool runs
this channel's pushes, pings and housekeeping.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import Pyro5.api
from Pyro5.callcontext import current_context

from channel_server import boundary
from channel_server.access import Access
from channel_server.acking import Acking
from channel_server.backup import ChannelBackup
from channel_server.channel_state import ChannelState, MemberSession
from channel_server.channel_stats import ChannelStats
from channel_server.config import ChannelConfig
from channel_server.core.channel_core import ChannelCore
from channel_server.core.load import CpuTimes, unknown_machine
from channel_server.core.member import PULL_CALLBACK
from channel_server.core.records import ChannelKind
from channel_server.dead_letters import DeadLetters
from channel_server.dispatch import DispatchPool
from channel_server.events import IdScope
from channel_server.liveness import Liveness
from channel_server.membership import Membership
from channel_server.outcomes import Outcomes
from channel_server.publishing import Publishing
from channel_server.pull import PullSide
from channel_server.push import PushDelivery
from channel_server.steady_clock import steady_time
from channel_server.store.base import Store
from channel_server.strict_calls import checked_arity
from channel_server.upkeep import Upkeep
from channel_server.users import Action

SESSION_SEED_SCALE = 1_000_000
"""Sessions start at the clock in microseconds, or past those of the channel's earlier
lives on its store if that is more (Store.claim_sessions): each life uses new ones."""


@checked_arity
class EventChannel:
    """A named channel: publish events, subscribe consumers, acknowledge, read its state.

    Only the methods marked ``@expose`` are reachable over RPC; ``restore``,
    ``housekeep``, ``kill_queues``, ``connection_closed``, ``check_invariant`` and
    ``close`` are for the broker and the tests.
    """

    def __init__(
        self,
        name: str,
        config: ChannelConfig,
        store: Store,
        pool: DispatchPool,
        access: Access | None = None,
        kind: ChannelKind = ChannelKind.QUEUE,
        clock: Callable[[], float] = steady_time,
        id_scope: IdScope = IdScope.PUBLISHER,
        cpu_clock: Callable[[], float] = time.process_time,
        machine_clock: Callable[[], CpuTimes | None] = unknown_machine,
    ) -> None:
        """``access``: who may do what (default: a judge for in-process callers only);
        ``id_scope``: where event ids must be unique (fixed when the channel is created);
        ``cpu_clock``: this process's CPU seconds and ``machine_clock`` its machine's CPU
        times (whether the broker is busy; by default the machine's are unknown)."""
        self._name = name
        self.config = config
        self._access = access or Access(secrets.token_urlsafe())
        core = ChannelCore(name, config, kind, int(clock() * SESSION_SEED_SCALE), id_scope)
        if store.durable:  # the memory store keeps every payload anyway
            core.spill.reader = partial(store.payloads, name)
        self._state = state = ChannelState(name, config, core, clock)
        backup = ChannelBackup(state, store)
        outcomes = Outcomes(state, backup)
        push = PushDelivery(state, pool, outcomes, cpu_clock, machine_clock)
        liveness = Liveness(state, push)
        self._members = members = Membership(state, self._access, backup, push, liveness)
        self._publishing = Publishing(state, backup, push)
        self._acking = Acking(state, backup, outcomes, members, push, liveness)
        push.answers = self._acking.answered  # the acks of push replies
        self._pull = PullSide(state, backup, self._acking, outcomes, members, push)
        self._dead = DeadLetters(state, backup, push)
        self._stats = stats = ChannelStats(state, store, push.load_figures)
        self._upkeep = Upkeep(state, backup, members, push, liveness, stats)

    @property
    def core(self) -> ChannelCore:
        """The pure core (tests read and poke it; hold no reference across calls)."""
        return self._state.core

    def restore(self) -> int:
        """Load what the store kept (a restart) and resume pushing to the saved members.
        Call once, before the channel is published. Returns the events restored."""
        return self._upkeep.restore()

    @property
    def name(self) -> str:
        """(Not exposed: the daemons refuse property reads over the wire, so a proxy would
        list a ``name`` it cannot read; callers know the name they looked up.)"""
        return self._name

    @property
    def kind(self) -> ChannelKind:
        """A queue (one group) or a topic (a group per subscriber), fixed at creation."""
        return self._state.core.kind

    @property
    def id_scope(self) -> IdScope:
        """Where its event ids must be unique (fixed at creation)."""
        return self._state.core.id_scope

    @Pyro5.api.expose
    def ping(self) -> str:
        """Liveness check for clients; returns the channel name. Only to a caller with
        some permission on it (NotAuthorized otherwise, as for everything else here)."""
        self._access.require_any(self._name)
        return self._name

    # -- publishing ----------------------------------------------------------------------
    @Pyro5.api.expose
    def publish(self, batch: Any) -> dict[str, Any]:
        """Store and enqueue a batch. Returns accepted / duplicates / refused / unrouted.

        Raises InvalidEvent (nothing stored) or QueueFull (the front of the batch that fit
        was stored; the exception says how much).
        """
        self._access.require(Action.PUBLISH, self._name)
        events = self._publishing.validate(batch)
        self._access.require_publisher((ev.publisher_id for ev in events), self._name)
        return self._publishing.publish(events)

    @Pyro5.api.expose
    def outstanding(self, publisher_id: str) -> dict[str, Any]:
        """How much of ``publisher_id``'s accepted work is not done yet: ``outstanding``
        deliveries (``queued`` + ``in_flight``; 0: every event was acknowledged or
        dead-lettered), its ``dead_letters``, and ``unserved``: the groups whose share
        waits with no active member (group -> queued). What ``Publisher.wait`` polls. Queues
        that lost events (kill_queues) are rebuilt first, so none is missed."""
        boundary.check_name("publisher_id", publisher_id)
        self._access.require(Action.PUBLISH, self._name)
        self._access.require_publisher((publisher_id,), self._name)
        return self._publishing.outstanding(publisher_id)

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
        group = self._members.group_of(subscriber_id, group)
        callback = PULL_CALLBACK if callback is None else boundary.check_callback(callback)
        pull = callback == PULL_CALLBACK
        if not pull:
            self._check_callback_host(callback)
        prefetch = 1 if pull else boundary.check_prefetch(prefetch, self.config)
        secret = "" if pull else boundary.check_secret(callback_secret)
        return self._members.subscribe(subscriber_id, group, callback, prefetch, secret)

    def _check_callback_host(self, callback: str) -> None:
        """See boundary.check_callback_host: the connection of the current call, if any."""
        conn, caller = current_context.client, current_context.client_sock_addr
        local = conn.sock.getsockname() if conn is not None and caller is not None else None
        boundary.check_callback_host(callback, caller, self.config.callback_hosts, local)

    @Pyro5.api.expose
    def unsubscribe(
        self,
        subscriber_id: str,
        group: str | None = None,
        session: int | None = None,
        last_uid: str | None = None,
    ) -> bool:
        """Leave the group (idempotent: False if not a member). What the member held goes
        back to the head of its partitions; in ``default`` its partitions go back to the
        pool; the last member of another group takes the group and its backlog with it.
        ``session``: the leaving process's; False when another session holds the id now
        (its id was taken over while it was frozen: the new process stays). ``last_uid``:
        a pull member's last message got, acknowledged first (it does not go back to the
        group as not got)."""
        boundary.check_name("subscriber_id", subscriber_id)
        if session is not None:
            session = boundary.check_seq("session", session)
        last_uid = boundary.check_last_uid(last_uid)
        group = self._members.group_of(subscriber_id, group)
        if last_uid is not None:
            self._pull.acknowledge(subscriber_id, group, last_uid)
        return self._members.unsubscribe(subscriber_id, group, session)

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
        group = self._members.group_of(subscriber_id, group)
        force = boundary.check_flag("force", force)
        self._access.require(Action.ADMIN, self._name)
        return self._members.forget(subscriber_id, group, force)

    @Pyro5.api.expose
    def memberships(self, subscriber_id: str) -> list[dict[str, Any]]:
        """The groups of this channel the subscriber belongs to."""
        boundary.check_name("subscriber_id", subscriber_id)
        return self._members.memberships(subscriber_id)

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
        from_seq: int = 0,
        returned: list[str] | None = None,
    ) -> dict[str, Any]:
        """A push subscriber reports events its handlers finished, named by uid
        (``publisher_id/id``): ``acked`` ones are done, ``nacked`` ones failed (retried, or
        dead-lettered after ``max_attempts``), ``returned`` ones were not handled because
        an earlier event of their partition failed (delivered again after it, counting
        against nobody), and any other event it was given with a seq from ``from_seq``
        through ``through_seq`` was skipped (redelivered). A subscriber
        whose pushes offer acks in the reply (``answer_s``) sends each message's own range,
        so messages may arrive in any order; one that does not may leave ``from_seq`` out.
        Answers ``{"status": "ok"}``, or ``"stale"`` for a session that is over (whose
        acks still count for events waiting for this member: after a broker restart,
        say)."""
        who = _member_session(subscriber_id, group, session)
        through_seq = boundary.check_seq("through_seq", through_seq)
        from_seq = boundary.check_seq("from_seq", from_seq)
        acked, nacked = boundary.check_acks(acked, nacked, self.config.max_prefetch)
        back = boundary.check_returned(returned, self.config.max_prefetch)
        return self._acking.ack(who, through_seq, acked, nacked, from_seq, back)

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
        who = _member_session(subscriber_id, group, session)
        if holding is not None:
            holding = boundary.check_seq("holding", holding)
        return self._acking.heartbeat(who, holding)

    # -- pull ----------------------------------------------------------------------------
    @Pyro5.api.expose
    def get(
        self,
        subscriber_id: str,
        last_uid: str | None = None,
        group: str | None = None,
        absorbs: bool = False,
    ) -> dict[str, Any]:
        """The classic exactly-once get. ``last_uid`` (``publisher_id/id`` of the event the
        client got last) is acknowledged and the next event returned; a retried get with
        the same ``last_uid`` returns the same event again. Answers ``{"status":
        "message", "event": {...}}`` or ``{"status": "empty"}``; raises NotSubscribed. A
        member timed out for not calling ``get`` is readmitted by its next one. The ack is
        on disk before the reply, unless the client ``absorbs`` repeats (it remembers
        what it got, as ``PullClient`` does, and acknowledges a message handed out again
        after a crash without showing it): then it is written with the other acks."""
        boundary.check_name("subscriber_id", subscriber_id)
        group = self._members.group_of(subscriber_id, group)
        last_uid = boundary.check_last_uid(last_uid)
        absorbs = boundary.check_flag("absorbs", absorbs)
        return self._pull.get(subscriber_id, group, last_uid, absorbs)

    @Pyro5.api.expose
    def release(
        self, subscriber_id: str, group: str | None = None, last_uid: str | None = None
    ) -> None:
        """A pull client closing: the last message it got (``last_uid``) is acknowledged
        (on disk), and it is inactive until its next ``get``, so its group's other members
        take its partitions now instead of after ``--pull-timeout``, and do not get that
        message again. The subscription stays (``unsubscribe`` ends it)."""
        boundary.check_name("subscriber_id", subscriber_id)
        group = self._members.group_of(subscriber_id, group)
        self._pull.release(subscriber_id, group, boundary.check_last_uid(last_uid))

    # -- visibility ----------------------------------------------------------------------
    @Pyro5.api.expose
    def stats(self) -> dict[str, Any]:
        """A JSON-friendly snapshot: counters, groups, members and partitions. ``stored``
        is counted after the rest, outside the channel lock."""
        self._access.require_any(self._name)
        return self._stats.snapshot()

    @Pyro5.api.expose
    def dead_letters(self) -> list[dict[str, Any]]:
        """The dead-letter queue: events whose handler failed ``max_attempts`` times."""
        self._access.require(Action.ADMIN, self._name)
        return self._dead.rows()

    @Pyro5.api.expose
    def replay_dead_letters(self, ids: list[str] | None = None) -> int:
        """Queue dead letters (all, or those with these ids or uids ``publisher_id/id``)
        for delivery again; returns how many."""
        ids = boundary.check_id_list("ids", ids)
        self._access.require(Action.ADMIN, self._name)
        return self._dead.replay(ids)

    # -- the broker's side ---------------------------------------------------------------
    def connection_closed(self, conn_id: int) -> None:
        """A client connection closed (the broker's daemon says): see Liveness.closed."""
        self._upkeep.connection_closed(conn_id)

    def housekeep(self) -> None:
        """The broker's periodic round: ping silent members holding events, time out
        stuck handlers and quiet pull members, forget members inactive too long, drop
        idle partitions, expire the dedupe window, check the queues' invariant, and
        sample the counts for the rates ``stats`` reports."""
        self._upkeep.round()

    def kill_queues(self) -> int:
        """The fault of DESIGN §8: empty the in-memory queues and say nothing. The channel
        notices by its invariant (on the next publish, subscribe or housekeeping round)."""
        return self._upkeep.kill_queues()

    def check_invariant(self) -> None:
        """The queues' invariant in full (tests, debugging): the counters publish and get
        read must equal a count of the queues. Raises AssertionError naming the group."""
        self._upkeep.check_invariant()

    def holding(self) -> dict[str, int]:
        """What a delete would drop: its ``members``, ``unacked`` events and
        ``dead_letters``."""
        with self._state.lock:
            core = self._state.core
            members = sum(len(group.members) for group in core.groups.values())
            return {
                "members": members,
                "unacked": core.unacked,
                "dead_letters": len(core.dead_letters),
            }

    def close(self) -> None:
        """Stop pushing and close the links to the push members."""
        self._upkeep.close()


def _member_session(subscriber_id: str, group: str, session: int) -> MemberSession:
    """The member an ack or a heartbeat comes from, its arguments checked."""
    boundary.check_name("subscriber_id", subscriber_id)
    boundary.check_name("group", group)
    return MemberSession(subscriber_id, group, boundary.check_seq("session", session))
