"""The publish side of one channel: validate, store and queue a batch (DESIGN §3, §7).

A batch is validated whole before the channel lock is taken (validation is pure and the
longest part of publishing a big batch: up to ``max_publish_batch`` events); under the lock
it is numbered, deduplicated, bounded, committed to the store and queued. :class:`Publishing`
keeps no state of its own.
"""

from __future__ import annotations

import logging
from typing import Any

from channel_server.backup import ChannelBackup
from channel_server.channel_state import ChannelState
from channel_server.errors import QUEUE_LIMITS, QueueFull, StoreError
from channel_server.events import Event, validate_batch, validate_packed
from channel_server.log_throttle import Throttle
from channel_server.push import PushDelivery

log = logging.getLogger("channel_server.channel")

_CAPS = {
    "events": ("capacity", "--capacity"),
    "bytes": ("max_queued_bytes", "--max-queued-bytes"),
    "partitions": ("max_partition_queues", "--max-partition-queues"),
}
"""QueueFull's ``limit`` -> the configuration field that sets it and its flag (its unit:
``errors.QUEUE_LIMITS``)."""


class Publishing:
    """Accepts published batches and says how much of a publisher's work is left."""

    def __init__(self, state: ChannelState, backup: ChannelBackup, push: PushDelivery) -> None:
        self._state = state
        self._backup = backup
        self._push = push
        self._refusals = Throttle(log)
        """A full channel's refusals, and publishes the store could not write (a full
        disk), logged at most every 10 s: the operator learns of them from the broker's
        log, not only from the publishers."""

    def validate(self, batch: Any) -> list[Event]:
        """A published batch validated whole (InvalidEvent: nothing of it is kept)."""
        config = self._state.config
        if type(batch) is bytes:  # packed, as this version's publishers send it
            return validate_packed(batch, config.max_payload_bytes, config.max_publish_batch)
        return validate_batch(batch, config.max_payload_bytes, config.max_publish_batch)

    def publish(self, events: list[Event]) -> dict[str, Any]:
        """See EventChannel.publish (the caller validated the batch and checked the
        permissions)."""
        state, config = self._state, self._state.config
        with state.lock:
            self._backup.repair()  # publishing halts here while lost events are rebuilt
            now = state.now()
            outcome = state.core.prepare_valid(events, now)
            if outcome.accepted:
                try:
                    self._accept(outcome.accepted, now)
                except StoreError as exc:  # the publisher is told; so is the operator
                    self._refusals.error("store", "%s: publish refused: %s", state.name, exc)
                    raise
            state.core.count_publish(len(events), outcome)
        if outcome.refused:
            cap, flag = _CAPS[outcome.full_by]
            self._refusals.warning(
                "full",
                "%s: full: refused %d events (%d %s reached: %s)",
                state.name,
                len(outcome.refused),
                getattr(config, cap),
                QUEUE_LIMITS[outcome.full_by],
                flag,
            )
            raise QueueFull(
                state.name,
                getattr(config, cap),
                accepted=len(outcome.accepted),
                refused_ids=outcome.refused,
                duplicates=outcome.duplicates,
                retry_after_s=config.queue_full_retry_s,
                limit=outcome.full_by,
            )
        return outcome.summary()

    def _accept(self, events: list[Event], now: float) -> None:
        """Commit prepared events to the store, then queue them (under the lock). The
        commit stays under the lock on purpose: SQLite lets go of the GIL for it, and
        threads blocked on the lock do not compete for the GIL when the publish wants it
        back (measured: slightly faster than committing outside the lock)."""
        self._backup.accept(events, now)
        self._state.core.enqueue(events, now)
        self._backup.trim()
        self._push.published(now)
        self._push.changed()

    def outstanding(self, publisher_id: str) -> dict[str, Any]:
        """See EventChannel.outstanding (the caller checked the permission)."""
        with self._state.lock:
            if self._backup.repair():
                self._push.changed()  # wake the members the rebuilt queues have work for
            return self._state.core.outstanding(publisher_id).to_dict()
