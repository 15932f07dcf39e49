"""The publisher's state file: id sequences per channel and an interrupted put.

Before a batch is sent, the sequence number after it is saved, so a restarted publisher
never reuses an id (a crash mid-batch skips numbers rather than repeating them). A put is
journaled with its id before it is sent; a restarted client sends it again first, and the
channel's duplicate detection makes sure it is stored once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from channel_server.statefile import StateFile


class PublisherState:
    def __init__(self, state_dir: Path, publisher_id: str) -> None:
        self.file = StateFile(state_dir / f"publisher-{publisher_id}.json")

    def next_seq(self, channel: str) -> int | None:
        return self.file.load().get("seq", {}).get(channel)

    def reserve(self, channel: str, next_seq: int) -> None:
        """Record that numbers below ``next_seq`` are (about to be) used on ``channel``."""
        data = self.file.load()
        data.setdefault("seq", {})[channel] = next_seq
        self.file.save(data)

    def pending_put(self) -> dict[str, Any] | None:
        """The journaled put (``topic``, ``event``, ``key``) not known to be confirmed."""
        return self.file.load().get("pending_put")

    def journal_put(
        self, topic: str, event: dict[str, Any] | None, next_seq: int, key: str | None = None
    ) -> None:
        """Save the put about to be sent (None once it is confirmed) with the sequence.
        ``key`` names the unit of work it belongs to (a scenario step), so a rerun of that
        unit sends the same event again instead of a new one."""
        data = self.file.load()
        data.setdefault("seq", {})[topic] = next_seq
        data["pending_put"] = {"topic": topic, "event": event, "key": key} if event else None
        self.file.save(data)
