"""The processed-ID window that makes processing effectively-once (DESIGN §6).

A redelivered event whose id is in the window (its ack was lost, or the broker restarted)
is acknowledged without running the handler again. The window lives in memory, or also in
an append-only file (``--state-dir``) that is flushed to disk before the ack is returned,
so it survives a restart of the subscriber too.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import IO

DEFAULT_WINDOW = 100_000
COMPACT_FACTOR = 2
"""The file is rewritten with the live window once it holds this many windows of lines."""


class ProcessedIds:
    """A bounded FIFO set of processed ids, optionally mirrored to a file."""

    def __init__(self, window: int = DEFAULT_WINDOW, path: Path | None = None) -> None:
        self.window = window
        self.path = path
        self._ids: set[str] = set()
        self._order: deque[str] = deque()
        self._file: IO[str] | None = None
        self._lines = 0
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                self._remember(path.read_text(encoding="utf-8").split())
            self._compact()

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, event_ids: Iterable[str]) -> None:
        """Remember ids and, with a file, put them on disk before returning."""
        fresh = self._remember(event_ids)
        if self._file is not None and fresh:
            self._file.write("".join(f"{i}\n" for i in fresh))
            self._file.flush()
            os.fsync(self._file.fileno())
            self._lines += len(fresh)
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
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(f"{i}\n" for i in self._order), encoding="utf-8")
        os.replace(tmp, self.path)
        self._file = self.path.open("a", encoding="utf-8")
        self._lines = len(self._order)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
