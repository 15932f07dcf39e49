"""The processed-ID window that makes processing effectively-once (DESIGN §6).

It holds event uids (``publisher_id/id``: two publishers may use one id). A redelivered
event whose uid is in the window (its ack was lost, or the broker restarted)
is acknowledged without running the handler again. The window lives in memory, or also in
an append-only file (``--state-dir``; 0600 in a 0700 directory): ids are remembered as soon
as their handler returns and written to disk (``flush``) before their ack is sent, so the
window survives a restart of the subscriber too. One JSON string per line: an id cannot be
split or forged by whitespace in another id.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from channel_server.statefile import open_private_append, private_dir, write_private

log = logging.getLogger(__name__)
DEFAULT_WINDOW = 100_000
COMPACT_FACTOR = 2
"""The file is rewritten with the live window once it holds this many windows of lines."""


class ProcessedIds:
    """A bounded FIFO set of processed ids, optionally mirrored to a file.

    Thread-safe: the worker adds ids as handlers finish, the thread that sends acks
    flushes them to disk first. ``_lock`` guards everything below it.
    """

    def __init__(self, window: int = DEFAULT_WINDOW, path: Path | None = None) -> None:
        self.window = window
        self.path = path
        self._lock = threading.Lock()
        self._ids: set[str] = set()
        self._order: deque[str] = deque()
        self._unwritten: list[str] = []
        self._file: IO[str] | None = None
        self._lines = 0
        if path is not None:
            private_dir(path.parent)
            if path.exists():
                self._remember(_read(path))
            self._compact()

    def __contains__(self, event_id: object) -> bool:
        with self._lock:
            return event_id in self._ids

    def __len__(self) -> int:
        with self._lock:
            return len(self._ids)

    def recent(self, count: int) -> list[str]:
        """The ``count`` ids processed last, oldest first."""
        with self._lock:
            start = max(0, len(self._order) - count)
            return [self._order[i] for i in range(start, len(self._order))]

    def add(self, event_ids: Iterable[str]) -> None:
        """Remember ids (in memory now; on disk at the next ``flush``)."""
        with self._lock:
            fresh = self._remember(event_ids)
            if self._file is not None:
                self._unwritten.extend(fresh)

    def flush(self) -> None:
        """Put the ids remembered so far on disk (fsync) before their acks go out."""
        with self._lock:
            if self._file is None or not self._unwritten:
                return
            self._file.write("".join(json.dumps(i) + "\n" for i in self._unwritten))
            self._file.flush()
            os.fsync(self._file.fileno())
            self._lines += len(self._unwritten)
            self._unwritten.clear()
            if self._lines > COMPACT_FACTOR * self.window:
                self._compact()

    def _remember(self, event_ids: Iterable[str]) -> list[str]:
        fresh = []
        for event_id in event_ids:
            if event_id in self._ids:
                continue
            self._ids.add(event_id)
            self._order.append(event_id)
            fresh.append(event_id)
        while len(self._order) > self.window:
            self._ids.discard(self._order.popleft())
        return fresh

    def _compact(self) -> None:
        """Rewrite the file with the live window only (atomically, by rename)."""
        if self.path is None:
            return
        if self._file is not None:
            self._file.close()
        write_private(self.path, "".join(json.dumps(i) + "\n" for i in self._order))
        self._file = open_private_append(self.path)
        self._lines = len(self._order)

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _read(path: Path) -> list[str]:
    """The ids of a window file: one JSON string per line. A line that is not one (torn by
    a crash, or written by an older version as a bare id) is taken as the bare line."""
    ids = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            try:
                value = json.loads(line)
            except ValueError:
                value = line
            if isinstance(value, str):
                ids.append(value)
            else:
                log.warning("%s: ignoring a line that is not an id: %.60s", path, line)
    return ids
