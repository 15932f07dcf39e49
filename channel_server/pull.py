"""The pull side of a channel: the classic exactly-once ``get`` (DESIGN §4).

A mixin of :class:`channel_server.channel.EventChannel`, which owns the state it uses. A
pull member has no callback and prefetch 1: ``get`` hands out its one unacknowledged event
(kept in ``_pulls``) and acknowledges it when the client names it as its last id.
"""

from __future__ import annotations

from typing import Any

import Pyro5.api

from channel_server.core.group import Batch
from channel_server.errors import InvalidArgument, NotSubscribed
from channel_server.wire import check_name

PULL = ""
"""The callback of a pull member: it has none, it calls ``get``."""


class PullSide:
    """``get`` and ``memberships`` of an EventChannel (see the module docstring)."""

    _pulls: dict[tuple[str, str], Batch | None]

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
