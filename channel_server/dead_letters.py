"""A channel's dead-letter queue, for operators: list it, replay from it (DESIGN §6).

Events get there from acks (a handler failed ``max_attempts`` times) and from pushes (an
event that cannot cross the wire); the letters themselves live in the core.
:class:`DeadLetters` keeps no state of its own.
"""

from __future__ import annotations

import logging
from typing import Any

from channel_server.backup import ChannelBackup
from channel_server.channel_state import ChannelState
from channel_server.channel_stats import dead_letter_rows
from channel_server.push import PushDelivery

log = logging.getLogger("channel_server.channel")


class DeadLetters:
    """Lists and replays a channel's dead letters (the caller checked the permission)."""

    def __init__(self, state: ChannelState, backup: ChannelBackup, push: PushDelivery) -> None:
        self._state = state
        self._backup = backup
        self._push = push

    def rows(self) -> list[dict[str, Any]]:
        """Each letter as the event, its group, the error and the failures counted."""
        with self._state.lock:
            return dead_letter_rows(self._state.core, self._state.config.max_attempts)

    def replay(self, ids: list[str] | None) -> int:
        """Queue the letters with these ids or uids (all: None) again; returns how many."""
        with self._state.lock:
            chosen, restored = self._state.core.replay(None if ids is None else set(ids))
            self._backup.replayed(chosen, restored, self._state.now())
            self._push.changed()
        log.info("%s: replaying %d dead letters", self._state.name, len(chosen))
        return len(chosen)
