"""The push side of one channel: a link per push member, pushes run on the dispatch pool
(and the push an ack makes for its member, on the thread that served the ack, once the
reply is sent: one thread hand-off less per push).

:class:`PushDelivery` owns the links and the scheduling state (``_links``, ``_queued``,
``_again``, ``_lingering``, ``_task``, ``_pushed``, ``_probing``), guarded by the
channel lock like the rest of the channel. A member has at most one push task at a time
(on the pool, or deferred after an ack's reply); a wake-up that comes while it is queued
or being pushed to marks it ``_again``, so nothing is missed and no two threads push to
one member. The push itself runs outside the channel lock, under the link's own lock only.

Batching: a batch smaller than the member's room waits while the member holds events
not yet acknowledged, for the ack that empties its hands, at most ``dispatch_linger_s``
after its last push (Nagle's rule); for a member holding nothing it goes at once, unless
publishes stream in fast enough that waiting ``stream_linger_s`` is expected to make it
half again as full (:mod:`~channel_server.core.arrivals`): then it waits that long, once.
So a channel that is not busy, or that is published to in bursts, adds no latency, and a
stream of small publishes is sent in fuller pushes (fewer RPCs and acks). On a broker busy
on its CPU (``busy_cpu``, or half that on a machine whose CPUs are saturated,
``busy_machine``: :mod:`~channel_server.core.load`), a batch at most two thirds
full may instead wait as long as it is expected to take to fill, at most ``busy_linger_s``,
once: the CPU a push and its ack cost is then what limits the broker, and a saturated
broker's queues already cost more latency than the wait.

Acks in the reply: a push offers the subscriber ``answer_wait_s`` to finish its events
before it answers, and a subscriber that did puts their acks in the reply (applied by
:meth:`~channel_server.acking.Acking.answered`, set as ``answers``). The thread that made
the push then looks for the member's next one itself, while no other pool task is due.
A slow handler simply answers without acks and sends them later, as before.
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import Pyro5.errors

from channel_server import after_reply
from channel_server.channel_state import ChannelState, MemberKey
from channel_server.core import poison, rebalance
from channel_server.core.arrivals import Arrivals
from channel_server.core.group import ConsumerGroup
from channel_server.core.health import Delay
from channel_server.core.load import CpuLoad, CpuTimes, unknown_machine
from channel_server.core.member import Batch, Member
from channel_server.dispatch import DispatchPool, MemberLink, NotSent, wire_fault
from channel_server.log_throttle import Throttle
from channel_server.outcomes import Outcomes

log = logging.getLogger("channel_server.channel")
BUSY_LOG_EVERY_S = 60.0
"""The broker going busy (or quiet again) is logged at most once a minute each way."""
LEAVING_PAUSE_S = 1.0
"""No push to a member that said it is leaving for this long (it unsubscribes soon)."""


class Linger(float):
    """A pause that waits for more events (an ack ends it early), not a back-off."""


class Answered(enum.Enum):
    """A push whose reply carried acks: the member may have room for its next at once."""

    ACKS = "acks"


class PushDelivery:
    """Pushes a channel's events to its push members, on the broker's dispatch pool."""

    def __init__(
        self,
        state: ChannelState,
        pool: DispatchPool,
        outcomes: Outcomes,
        cpu_clock: Callable[[], float] = time.process_time,
        machine_clock: Callable[[], CpuTimes | None] = unknown_machine,
    ) -> None:
        """``cpu_clock``: this process's CPU seconds (how busy the broker is);
        ``machine_clock``: the machine's CPU times (how busy its machine is; by default
        unknown)."""
        self._state = state
        self._pool = pool
        self._outcomes = outcomes
        self._config = state.config
        self._links: dict[MemberKey, MemberLink] = {}
        """The push members and their links (a pull member has none)."""
        self._queued: set[MemberKey] = set()
        """Members with a push task on the pool, or being pushed to (at most one each)."""
        self._again: set[MemberKey] = set()
        """Queued members woken meanwhile: look for work again when the task ends."""
        self._lingering: set[MemberKey] = set()
        """Queued members whose task waits for an ack or the end of the linger."""
        self._task: dict[MemberKey, int] = {}
        """The number of each queued member's current pool task (numbers never repeat): a
        lingering task whose member was woken by an ack is superseded by a new one, and
        ends without a look when its time comes."""
        self._numbers = itertools.count(1)
        self.answers: Callable[[MemberKey, int, Any], None] | None = None
        """Applies the acks of a push's reply: ``(member, session, acks)``
        (:meth:`~channel_server.acking.Acking.answered`, which needs this object first:
        the channel sets it once both exist)."""
        self._arrivals = Arrivals()
        self._load = CpuLoad()
        self._cpu = cpu_clock
        self._machine = machine_clock
        self._pushed: dict[MemberKey, tuple[float, int]] = {}
        """When each member was last sent a batch (the channel clock), and the channel's
        publish count then (``Arrivals.count``)."""
        self._streamed: set[MemberKey] = set()
        """Members whose next short batch already waited ``stream_linger_s``."""
        self._probing: set[MemberKey] = set()
        """Members being pinged (a ping task on the pool)."""
        self._acking = threading.local()
        """``key``: the member whose ack this thread is applying (see :meth:`acking`)."""
        self._busy_log = Throttle(log, BUSY_LOG_EVERY_S)
        """The broker going busy, or quiet again (around the threshold, every second)."""
        self._unexpected = Throttle(log)
        """Unexpected push failures (a store that lost a cold event's row fails every
        retry of that member's push): one traceback per 10 s, not one per retry."""

    # -- called under the channel lock ---------------------------------------------------
    def changed(self) -> None:
        """After any change to the channel: log and persist what its groups noted, and
        wake the push members that may have work now."""
        for key in self._outcomes.notices():
            self.wake(key)

    def published(self, now: float) -> None:
        """A publish queued events (before :meth:`changed` wakes the members)."""
        self._arrivals.publish(now)
        busy = self._busy()
        self._load.observe(now, self._cpu, self._machine)
        if self._busy() != busy:
            self._busy_log.info(
                "quiet" if busy else "busy",
                "%s: the broker used %.0f %% of a core, and the CPUs it runs on were %.0f %% "
                "busy over the last second: short pushes %s",
                self._state.name,
                100 * self._load.share,
                100 * self._load.machine_share,
                "go at once again" if busy else "wait to fill",
            )

    def _busy(self) -> bool:
        return self._load.busy(self._config.busy_cpu, self._config.busy_machine)

    def load_figures(self) -> dict[str, Any]:
        """Under the channel lock: how busy the broker and its machine were over the
        second before a recent publish, and whether short pushes wait to fill (stats)."""
        return {
            "broker_cpu_share": round(self._load.share, 3),
            "machine_cpu_share": round(self._load.machine_share, 3),
            "busy": self._busy(),
        }

    def member_joined(self, key: MemberKey, callback: str, secret: str) -> None:
        """A push member joined or resumed: (re)open its link, then look for work."""
        link = self._links.get(key)
        if link is None or (link.callback, link.secret) != (callback, secret):
            if link is not None:  # another process took the id over: the old one's push ends
                link.abort()
                self._pool.submit(link.close)
            config = self._config
            self._links[key] = MemberLink(
                callback,
                secret,
                config.ack_timeout_s,
                config.liveness_timeout_s,
                config.answer_wait_s,
            )
        self._end_linger(key)
        self.wake(key)

    def member_left(self, key: MemberKey) -> None:
        link = self._links.pop(key, None)
        if link is not None:
            link.abort()
            self._pool.submit(link.close)
        self._pushed.pop(key, None)
        self._streamed.discard(key)
        self._probing.discard(key)

    def wake(self, key: MemberKey) -> None:
        """The member may have work: queue it on the pool (once)."""
        if key not in self._links:
            return
        if key in self._queued:
            self._again.add(key)
            return
        self._queued.add(key)
        self._schedule(key)

    @contextmanager
    def acking(self, key: MemberKey) -> Iterator[None]:
        """Around applying ``key``'s ack: its next push is made by this thread once the
        ack's reply is sent (:mod:`after_reply`), not handed to a pool thread. Pushes to
        other members, and later ones, go to the pool as ever."""
        self._acking.key = key
        try:
            yield
        finally:
            self._acking.key = None

    def acknowledged(self, key: MemberKey) -> None:
        """The member acknowledged events: a batch lingering for it goes now, if it holds
        nothing else unacknowledged."""
        if not self._holding(key):
            self._end_linger(key)

    def _holding(self, key: MemberKey) -> bool:
        """Whether the member holds events it has not acknowledged."""
        member = self._state.core.member(*key)
        return member is not None and bool(member.flights)

    def _end_linger(self, key: MemberKey) -> None:
        """A task waiting out a linger is superseded by one that looks now."""
        if key in self._lingering:
            self._lingering.discard(key)
            self._schedule(key)

    def _schedule(self, key: MemberKey, delay: float = 0.0) -> None:
        number = self._task[key] = next(self._numbers)

        def task() -> None:
            self._service(key, number)

        inline = delay <= 0 and getattr(self._acking, "key", None) == key
        if not (inline and after_reply.defer(task)):
            self._pool.submit(task, delay, full=self._full(key))

    def _full(self, key: MemberKey) -> bool:
        """Whether the member has at least a push's worth queued (its next push is full:
        waiting for a turn of the pool would not fill it more)."""
        member = self._state.core.member(*key)
        return member is not None and member.queued >= member.room > 0

    def probe(self, key: MemberKey) -> None:
        """Ping a silent member that holds events (frozen, or gone?)."""
        link = self._links.get(key)
        if link is None or key in self._probing:
            return
        self._probing.add(key)
        self._pool.submit(lambda: self._ping(key, link))

    def detach(self) -> list[MemberLink]:
        """Stop pushing; returns the links for the caller to close outside the lock."""
        links = list(self._links.values())
        self._links.clear()
        return links

    # -- pool tasks ----------------------------------------------------------------------
    def _service(self, key: MemberKey, number: int) -> None:
        """One push to the member, if it has work; then queue it again if it has more."""
        with self._state.lock:
            if self._task.get(key) != number:
                return  # superseded: an ack ended its linger
            self._lingering.discard(key)
        delay: float | None = None
        try:
            while (pushed := self._push_once(key)) is Answered.ACKS and self._go_on(key, number):
                pass  # its next push, on this thread
            delay = None if pushed is Answered.ACKS else pushed
        except Exception:
            self._unexpected.error(
                "push",
                "%s: pushing to %s failed unexpectedly",
                self._state.name,
                key[1],
                exc_info=True,
            )
            delay = self._config.retry_backoff_s
        finally:
            with self._state.lock:
                self._finish(key, delay)

    def _go_on(self, key: MemberKey, number: int) -> bool:
        """After a push answered with acks: whether this thread makes the member's next
        push now (it has work, its task stands, and no other task waits for a thread)."""
        with self._state.lock:
            grp = self._state.core.groups.get(key[0])
            if self._task.get(key) != number or key not in self._links or grp is None:
                return False
            if not grp.has_ready(key[1]) or not self._pool.carry_on():
                return False
            self._again.discard(key)
            return True

    def _finish(self, key: MemberKey, delay: float | None) -> None:
        grp = self._state.core.groups.get(key[0])
        if key not in self._links or grp is None:
            self._let_go(key)
        elif isinstance(delay, Linger) and self._holding(key):
            self._lingering.add(key)
            self._schedule(key, delay)
        elif isinstance(delay, Linger):  # acknowledged meanwhile: look again now
            self._schedule(key)
        elif delay is not None:
            self._schedule(key, delay)
        elif key in self._again or grp.has_ready(key[1]):
            self._again.discard(key)
            self._schedule(key)
        else:
            self._let_go(key)

    def _let_go(self, key: MemberKey) -> None:
        """The member's task ends with nothing to do: a wake-up queues it anew."""
        self._queued.discard(key)
        self._task.pop(key, None)

    def _push_once(self, key: MemberKey) -> float | Answered | None:
        """Take a batch and push it. Returns seconds to wait before trying again (a
        back-off or a linger), Answered.ACKS when the reply carried acks, or None."""
        group, member_id = key
        with self._state.lock:
            grp = self._state.core.groups.get(group)
            member = grp.members.get(member_id) if grp else None
            link = self._links.get(key)
            if grp is None or member is None or link is None or not member.active:
                return None
            now = self._state.now()
            if now < member.retry_at:
                return member.retry_at - now
            if (wait := self._wait(key, grp, member, now)) is not None:
                return wait
            batch = grp.take_batch(member_id, now)
            if batch is None:
                return None
            if grp.suspects and (lethal := poison.lethal(grp, batch.events)):
                self._outcomes.bury(grp, member_id, batch.session, batch.seqs, lethal)
                self.changed()  # what waited behind it goes out at once
                return None
            self._pushed[key] = (now, self._arrivals.count)
        try:
            reply, elapsed = link.push(batch)
            if isinstance(reply, dict) and reply.get("leaving") is True:
                return self._declined(batch)
            if not _accepted(reply, batch):
                raise ValueError(f"malformed reply {reply!r:.80}")
        except Exception as exc:  # transport or remote failure: both are a failed push
            if not _transport(exc) and (faults := _wire_faults(batch)):
                self._unpushable(batch, faults)  # ... unless events of it are at fault
                return None
            return self._failed(batch, exc)
        self._delivered(batch, elapsed)
        if (answer := reply.get("acks")) is not None and self.answers is not None:
            self.answers(key, batch.session, answer)
            return Answered.ACKS
        return None

    def _wait(self, key: MemberKey, grp: ConsumerGroup, member: Member, now: float) -> float | None:
        """How long the member's next batch waits to be fuller, if it would be short (the
        rules are in the module docstring); None: it goes now."""
        last, count_at_push = self._pushed.get(key, (-math.inf, 0))
        if member.flights:
            left = last + self._config.dispatch_linger_s - now
            if left > 0 and grp.shortfall(key[1]) is not None:
                return Linger(left)
        elif key not in self._streamed and (wait := self._linger(grp, key[1], count_at_push)):
            self._streamed.add(key)  # once: the batch goes when the wait is over
            return wait
        self._streamed.discard(key)
        return None

    def _linger(self, grp: ConsumerGroup, member_id: str, count_at_push: int) -> float:
        """How long a short batch for a member holding nothing waits (0: none): the stream
        linger while publishes stream in; on a busy broker, while it should fill."""
        config = self._config
        streaming = self._arrivals.worth_lingering(config.stream_linger_s, count_at_push)
        busy = self._busy()
        if not (streaming or busy) or (short := grp.shortfall(member_id)) is None:
            return 0.0
        wait = config.stream_linger_s if streaming else 0.0
        if busy:
            ready, room = short
            filling = self._arrivals.filling_linger(
                ready, room, count_at_push, config.busy_linger_s, self._state.now()
            )
            wait = max(wait, filling)
        return wait

    def _unpushable(self, batch: Batch, faults: dict[str, str]) -> None:
        """The push failed for the fault of some of its events: they are dead-lettered and
        the rest goes out again at once; the member is not blamed."""
        with self._state.lock:
            grp = self._state.core.groups.get(batch.group)
            if grp is not None:
                self._outcomes.bury(grp, batch.member_id, batch.session, batch.seqs, faults)
                self.changed()

    def _declined(self, batch: Batch) -> float:
        """The subscriber is stopping: it will acknowledge what it did and unsubscribe."""
        with self._state.lock:
            grp = self._state.core.groups.get(batch.group)
            if grp is not None:
                grp.push_declined(batch, self._state.now(), LEAVING_PAUSE_S)
                rebalance.leaving(grp, batch.member_id)
                self.changed()
        return LEAVING_PAUSE_S

    def _delivered(self, batch: Batch, elapsed_s: float) -> None:
        with self._state.lock:
            grp = self._state.core.groups.get(batch.group)
            if grp is None or not grp.delivered(batch, self._state.now()):
                return
            self._observe_delay(grp, batch.member_id, elapsed_s)
            self.changed()

    def _failed(self, batch: Batch, error: Exception) -> float | None:
        with self._state.lock:
            grp = self._state.core.groups.get(batch.group)
            now = self._state.now()
            if grp is None:
                return None
            gave_up = grp.push_failed(batch, now, sent=not isinstance(error, NotSent))
            member = grp.members.get(batch.member_id)
            self.changed()
            retry_in = member.retry_at - now if member and member.active else None
        if not gave_up:
            log.warning(
                "%s: push of %d events to %s failed: %s",
                self._state.name,
                len(batch.events),
                batch.member_id,
                error,
            )
        return retry_in

    def _ping(self, key: MemberKey, link: MemberLink) -> None:
        """Ping a member; one that does not answer is pinged again after the back-off of
        a failed push, until it answers or ``max_attempts`` failures make it inactive."""
        alive = link.answers()
        with self._state.lock:
            grp = self._state.core.groups.get(key[0])
            member = grp.members.get(key[1]) if grp else None
            replaced = self._links.get(key) is not link
            if grp is None or member is None or not member.active or replaced:
                self._probing.discard(key)
                return
            now = self._state.now()
            if alive:
                self._probing.discard(key)
                grp.probe_answered(key[1], now)
            else:
                log.warning("%s: %s does not answer a ping", self._state.name, key[1])
                if grp.probe_failed(key[1], now):
                    self._probing.discard(key)
                else:
                    self._pool.submit(lambda: self._ping(key, link), member.retry_at - now)
            self.changed()

    def _observe_delay(self, grp: ConsumerGroup, member_id: str, elapsed_s: float) -> None:
        member = grp.members.get(member_id)
        if member is None:
            return
        delay, offload = member.delays.observe(elapsed_s, self._state.now())
        if delay is Delay.NONE:
            rebalance.fast_again(grp, member)
            return
        log.info("%s: %s delay from %s: %.3f s", self._state.name, delay, member_id, elapsed_s)
        if offload and member.active:
            log.warning(
                "%s: %d long delays of %s within %g s: its queued partitions move to others",
                self._state.name,
                self._config.long_delay_count,
                member_id,
                self._config.long_delay_window_s,
            )
            rebalance.offload(grp, member_id)


def _transport(error: Exception) -> bool:
    """A failure of the connection (refused, closed, timed out): not the events' fault.
    A protocol error (a message that cannot be serialized or is too large) may be."""
    if isinstance(error, Pyro5.errors.ProtocolError):
        return False
    return isinstance(error, Pyro5.errors.CommunicationError | OSError)


def _wire_faults(batch: Batch) -> dict[str, str]:
    """The events of a batch that cannot cross the wire on their own (uid -> why)."""
    faults = {}
    for ev, attempt in zip(batch.events, batch.attempts, strict=True):
        if fault := wire_fault(ev.to_dict(attempt)):
            faults[ev.uid] = fault
    return faults


def _accepted(reply: Any, batch: Batch) -> bool:
    """A subscriber answers a push with how many events it queued (all of them)."""
    return isinstance(reply, dict) and reply.get("queued") == len(batch.events)
