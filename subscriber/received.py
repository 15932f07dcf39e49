"""The pull client's journal: the last message received on each topic.

An append-only JSON-lines file, one line per message received, flushed before the message
is shown: a crash of the client loses nothing (the next ``get`` names this id as the last
one) and repeats nothing. A line torn by a crash is ignored: its message was never shown,
so the broker hands it out again. The file is compacted when opened and every
``COMPACT_LINES`` lines.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

COMPACT_LINES = 10_000


class ReceivedJournal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._last: dict[str, dict[str, Any] | None] = {}
        self._lines = 0
        self._file: IO[str] | None = None
        if path.exists():
            self._read()
        self._compact()

    def _read(self) -> None:
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # torn by a crash: that message was never shown
                self._last[record["topic"]] = record.get("event")

    def last(self, topic: str) -> dict[str, Any] | None:
        """The last message received on ``topic`` (None: none since subscribing)."""
        return self._last.get(topic)

    def last_id(self, topic: str) -> str | None:
        event = self._last.get(topic)
        return None if event is None else event["id"]

    def record(self, topic: str, event: dict[str, Any] | None) -> None:
        """Remember the message just received (None: forget the topic), on disk."""
        if self._file is None:
            raise ValueError(f"{self.path}: the journal is closed")
        self._last[topic] = event
        self._file.write(json.dumps({"topic": topic, "event": event}) + "\n")
        self._file.flush()
        self._lines += 1
        if self._lines >= COMPACT_LINES:
            self._compact()

    def _compact(self) -> None:
        """Rewrite the journal with one line per topic (atomically, by rename)."""
        if self._file is not None:
            self._file.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for topic, event in self._last.items():
                if event is not None:
                    f.write(json.dumps({"topic": topic, "event": event}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._file = self.path.open("a", encoding="utf-8")
        self._lines = 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
