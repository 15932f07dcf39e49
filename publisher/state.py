"""The publisher's state file: id sequences per channel and an interrupted put.

Before a batch is sent, a sequence number beyond it is saved (numbers reserved ahead, so
the file is not written before every batch), so a restarted publisher never reuses an id: a
crash skips numbers rather than repeating them, and a clean close gives back the ones it did
not use. A put is journaled with its id before it is sent; a restarted client sends it
again first, and the channel's duplicate detection makes sure it is stored once.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from channel_client.statefile import StateFile, state_path


class PublisherState:
    def __init__(self, state_dir: Path, publisher_id: str) -> None:
        """``publisher-<publisher_id>.json`` in ``state_dir`` (InvalidArgument for an id
        that is not a plain name, before anything is written)."""
        self.file = StateFile(state_path(state_dir, "publisher", publisher_id, suffix=".json"))

    def next_seq(self, channel: str) -> int | None:
        return self._load()[1].get(channel)

    def reserve(self, channel: str, next_seq: int) -> int:
        """Record that numbers below ``next_seq`` are (about to be) used on ``channel``.
        Never lowers what is recorded: a publisher started at an earlier number
        (``--start-seq``, ``next_seq=``) does not make the numbers above it free again.
        Returns what was recorded before (0: nothing)."""
        with self.file.locked():
            data, seq = self._load()
            before = seq.get(channel, 0)
            seq[channel] = max(next_seq, before)
            data["seq"] = seq
            self.file.save(data)
        return int(before)

    def release(self, channel: str, reserved: int, next_seq: int) -> None:
        """Give back numbers reserved ahead and not used: what is recorded goes down from
        ``reserved`` to ``next_seq``, only if it still is ``reserved`` (nobody reserved
        after this publisher, and no put journaled since)."""
        with self.file.locked():
            data, seq = self._load()
            if seq.get(channel) != reserved or next_seq >= reserved:
                return
            seq[channel] = next_seq
            data["seq"] = seq
            self.file.save(data)

    def pending_put(self) -> dict[str, Any] | None:
        """The journaled put (``topic``, ``event``, ``key``) not known to be confirmed."""
        pending = self._load()[0].get("pending_put")
        if pending is not None and pending.pop("payload_base64", False):
            event = pending["event"]
            event["payload"] = base64.b64decode(event["payload"])
        return pending

    def journal_put(
        self, topic: str, event: dict[str, Any] | None, next_seq: int, key: str | None = None
    ) -> None:
        """Save the put about to be sent (None once it is confirmed) with the sequence.
        ``key`` names the unit of work it belongs to (a scenario step), so a rerun of that
        unit sends the same event again instead of a new one."""
        with self.file.locked():
            data, seq = self._load()
            seq[topic] = next_seq
            data["seq"] = seq
            data["pending_put"] = _journaled(topic, event, key)
            self.file.save(data)

    def _load(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The state and its ``seq`` object, checked (StoreError naming the file if not)."""
        data = self.file.load()
        seq = self.file.section(data, "seq")
        if any(type(n) is not int or n < 0 for n in seq.values()):
            raise self.file.malformed("'seq' holds a value that is not a whole number >= 0")
        pending = data.get("pending_put")
        if pending is not None and not _is_put(pending):
            raise self.file.malformed("'pending_put' is not a {topic, event, key} object")
        return data, seq


def _journaled(topic: str, event: dict[str, Any] | None, key: str | None) -> Any:
    """A put as the JSON state file holds it: a payload of bytes (which JSON has not) in
    base64, saying so (``Putter.put`` of bytes raised TypeError, session 34's newcomer)."""
    if event is None:
        return None
    if isinstance(event.get("payload"), bytes):
        text = base64.b64encode(event["payload"]).decode("ascii")
        event = {**event, "payload": text}
        return {"topic": topic, "event": event, "key": key, "payload_base64": True}
    return {"topic": topic, "event": event, "key": key}


def _is_put(put: Any) -> bool:
    if not isinstance(put, dict):
        return False
    event = put.get("event")
    return (
        type(put.get("topic")) is str
        and isinstance(event, dict)
        and type(event.get("id")) is str
        and (put.get("key") is None or type(put["key"]) is str)
    )
