"""The ``--record`` sink: one JSON line per processed event, flushed as it is written.

Besides the event's fields, a line names the subscriber, its process id and the wall-clock
time the handler finished (``at``), so a checker can tell which incarnation of a subscriber
processed what, and when.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import IO, Any

from channel_client.statefile import open_private_append

RECORDED_FIELDS = ("id", "publisher_id", "partition", "timestamp", "attempt")

log = logging.getLogger(__name__)


class Recorder:
    """Appends processed events to a JSON-lines file; safe to call from any thread."""

    def __init__(self, path: Path, subscriber_id: str) -> None:
        self.path = path
        self.subscriber_id = subscriber_id
        self._lock = threading.Lock()
        """Guards _file."""
        self._file: IO[str] = open_private_append(path)
        """0600 (a wider existing file is tightened), never opened through a link."""
        self._pid = os.getpid()

    def write(self, event: dict[str, Any]) -> None:
        line = {name: event.get(name) for name in RECORDED_FIELDS}
        line["subscriber"] = self.subscriber_id
        line["pid"] = self._pid
        line["at"] = time.time()
        with self._lock:
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()  # on disk before the next event starts, so before the ack

    def close(self) -> None:
        """Close the file; one that cannot take its last lines (a full disk) is logged, so
        the subscriber's stop goes on to its other files."""
        with self._lock:
            try:
                self._file.close()
            except OSError as exc:
                log.error("record file %s: its last lines were not written: %s", self.path, exc)


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record in a file (tests and tools)."""
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
