"""The ``--record`` sink: one JSON line per processed event, flushed as it is written."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import IO, Any

RECORDED_FIELDS = ("id", "publisher_id", "partition", "timestamp", "attempt")


class Recorder:
    """Appends processed events to a JSON-lines file; safe to call from any thread."""

    def __init__(self, path: Path, subscriber_id: str) -> None:
        self.path = path
        self.subscriber_id = subscriber_id
        self._lock = threading.Lock()
        """Guards _file."""
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, event: dict[str, Any]) -> None:
        line = {name: event.get(name) for name in RECORDED_FIELDS}
        line["subscriber"] = self.subscriber_id
        with self._lock:
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()  # on disk before the next event starts, so before the ack

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record in a file (tests and tools)."""
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
