"""The pull client's journal: the last message received on each topic.

An append-only JSON-lines file, one line per message received, flushed before the message
is shown: a crash of the client loses nothing (the next ``get`` names this id as the last
one) and repeats nothing. A last line torn by a crash is ignored: its message was never
shown, so the broker hands it out again. The file is compacted when opened and every
``COMPACT_LINES`` lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from channel_client.statefile import AppendOnlyFile, malformed
from channel_server.events import event_uid

COMPACT_LINES = 10_000


class ReceivedJournal:
    def __init__(self, path: Path) -> None:
        """Open (or create) the journal ``path``, a plain name in a private directory;
        StoreError names the file when it is not a journal."""
        self._file = AppendOnlyFile(path)
        self.path = self._file.path
        self._last: dict[str, dict[str, Any] | None] = {}
        self._read()
        self._compact()

    def _read(self) -> None:
        """A torn last line is left out (that message was never shown); any other line
        that is not a record makes the journal malformed."""
        for number, line in enumerate(self._file.read(), 1):
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not _is_record(record):
                raise malformed(self.path, f"line {number} is not a {{topic, event}} record")
            self._last[record["topic"]] = record.get("event")

    def last(self, topic: str) -> dict[str, Any] | None:
        """The last message received on ``topic`` (None: none since subscribing)."""
        return self._last.get(topic)

    def last_id(self, topic: str) -> str | None:
        event = self._last.get(topic)
        return None if event is None else event["id"]

    def last_uid(self, topic: str) -> str | None:
        """What the next ``get`` names as received last: ``publisher_id/id``."""
        event = self._last.get(topic)
        if event is None:
            return None
        if type(event.get("publisher_id")) is not str:
            raise malformed(self.path, f"the last message of {topic} has no publisher_id")
        return event_uid(event["publisher_id"], event["id"])

    def record(self, topic: str, event: dict[str, Any] | None) -> None:
        """Remember the message just received (None: forget the topic), on disk."""
        self._file.append([json.dumps({"topic": topic, "event": event})])
        self._last[topic] = event
        if self._file.appended >= COMPACT_LINES:
            self._compact()

    def _compact(self) -> None:
        """Rewrite the journal with one line per topic (atomically, by rename)."""
        self._file.rewrite(
            [
                json.dumps({"topic": topic, "event": event})
                for topic, event in self._last.items()
                if event is not None
            ]
        )

    def close(self) -> None:
        self._file.close()


def _is_record(record: Any) -> bool:
    """``{"topic": str, "event": null | {"id": str, ...}}``."""
    if not isinstance(record, dict) or type(record.get("topic")) is not str:
        return False
    event = record.get("event")
    return event is None or (isinstance(event, dict) and type(event.get("id")) is str)
