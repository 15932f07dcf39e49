"""The push side of a channel: one dispatcher per push member, and what its pushes change.

A mixin of :class:`channel_server.channel.EventChannel`, which owns the state it uses
(``_lock``, ``_core``, ``_store``, ``_dispatchers``, ``_wakeups``) and the helpers that
persist and wake (``_persist_outcome``, ``_persist_owners``, ``_wake_ready``,
``_check_queues``, ``_trim_delivered``). Dispatchers call ``next_batch``, ``push_done`` and
``push_failed`` (the BatchSource protocol); the pushes themselves happen outside the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import Pyro5.core
import Pyro5.errors

from channel_server.core.group import Batch, ConsumerGroup
from channel_server.core.health import Delay
from channel_server.dispatcher import Dispatcher, DispatchStopped
from channel_server.errors import InvalidArgument
from channel_server.wire import make_proxy

log = logging.getLogger("channel_server.channel")


class PushSide:
    """Dispatcher bookkeeping of an EventChannel (see the module docstring)."""

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
        linger = self._config.dispatch_linger_s
        with self._lock:
            wakeup = self._wakeups[(group, member_id)]
            while True:
                grp = self._live_group(group, member_id, session)
                if linger > 0 and grp.ready_short(member_id):
                    wakeup.wait(linger)  # once per batch; not in _waiting, so not woken early
                    linger = 0
                    continue
                batch = grp.take_batch(member_id)
                if batch is not None:
                    return batch
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._housekeep(grp)
                    return None
                self._waiting.add((group, member_id))
                try:
                    wakeup.wait(remaining)
                finally:
                    self._waiting.discard((group, member_id))

    def _live_group(self, group: str, member_id: str, session: int) -> ConsumerGroup:
        grp = self._core.groups.get(group)
        member = grp.members.get(member_id) if grp else None
        if self._closed or member is None or member.session != session or not member.active:
            raise DispatchStopped
        return grp

    def push_done(self, group: str, batch: Batch, reply: Any, elapsed_s: float) -> None:
        acked, nacked = parse_reply(reply)
        with self._lock:
            grp = self._core.groups[group]
            outcome, retired = self._core.complete(grp, batch, acked, nacked)
            self._persist_outcome(group, outcome, retired)
            self._observe_delay(grp, batch.member_id, elapsed_s)
            grp.rebalance()
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

    def _observe_delay(self, grp: ConsumerGroup, member_id: str, elapsed_s: float) -> None:
        member = grp.members.get(member_id)
        if member is None:
            return
        delay, offload = member.delays.observe(elapsed_s, self._clock())
        if delay is Delay.NONE:
            member.offloaded = False  # fast again: rebalancing may give it work
        else:
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


def check_callback(callback: Any) -> str:
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


def answers(callback: str, timeout_s: float) -> bool:
    """Whether a subscriber's callback object still answers a ping."""
    try:
        with make_proxy(callback, timeout_s) as proxy:
            proxy.ping()
    except Exception:
        return False
    return True


def parse_reply(reply: Any) -> tuple[set[str], dict[str, str]]:
    """A subscriber's reply, ``{"acked": [ids], "nacked": {id: error}}``; anything malformed
    acknowledges nothing (so everything is redelivered)."""
    if not isinstance(reply, dict):
        return set(), {}
    acked = reply.get("acked", [])
    nacked = reply.get("nacked", {})
    acked_ids = {i for i in acked if type(i) is str} if isinstance(acked, list) else set()
    nacked_ids = {str(k): str(v) for k, v in nacked.items()} if isinstance(nacked, dict) else {}
    return acked_ids, nacked_ids
