"""The processed-ID window that makes processing effectively-once (DESIGN §6).

It holds event uids (``publisher_id/id``: two publishers may use one id). A redelivered
event whose uid is in the window (its ack was lost, or the broker restarted)
is acknowledged without running the handler again. The window lives in memory, or also in
an append-only file (``--state-dir``; 0600 in a 0700 directory): ids are remembered as soon
as their handler returns and written to disk (``flush``) before their ack is sent, so the
window survives a restart of the subscriber too.

The file is a header line (:data:`HEADER`), then one JSON string per line (``json.dumps``
escapes newlines and every other control character), so an id can neither be split nor
forge another one ("evil PUB-7" stays one id). Files of older versions have no header: one
JSON string per line, or older still one bare id per line; both are read (each whole line
one id) and rewritten in the current format. A last line without its newline was torn by a
crash before its ack went out, and is ignored. Anything else that is not an id is a
one-line StoreError naming the file: a window that cannot be trusted is not guessed at.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from channel_client.statefile import (
    AppendOnlyFile,
    malformed,
    private_dir,
    read_lines,
    state_path,
)
from channel_server.errors import StoreError

log = logging.getLogger(__name__)
DEFAULT_WINDOW = 100_000
COMPACT_FACTOR = 2
"""The file is rewritten with the live window once it holds this many windows of lines."""
FORMAT_NAME = "pubsub-processed-ids"
FORMAT_VERSION = 2
HEADER = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION})
"""The first line of a window file (older versions wrote none)."""


def window_path(state_dir: Path, channel: str, group: str | None, subscriber_id: str) -> Path:
    """``processed-<channel>-<group>-<id>.txt`` in ``state_dir`` (``auto``: the channel's
    choice of group), where a subscriber keeps its window across restarts."""
    return state_path(
        state_dir, "processed", channel, group or "auto", subscriber_id, suffix=".txt"
    )


class ProcessedIds:
    """A bounded FIFO set of processed ids, optionally mirrored to a file.

    Thread-safe: the worker adds ids as handlers finish, the thread that sends acks
    flushes them to disk first. ``_lock`` guards everything below it.
    """

    def __init__(self, window: int = DEFAULT_WINDOW, path: Path | None = None) -> None:
        self.window = window
        self._file = None if path is None else AppendOnlyFile(path)
        self.path = None if self._file is None else self._file.path
        self._lock = threading.Lock()
        self._ids: set[str] = set()
        self._order: deque[str] = deque()
        self._unwritten: list[str] = []
        self._rewrite_due = False
        """An append failed: the next flush rewrites the file whole."""
        self._closed = False
        if self._file is not None:
            private_dir(self._file.path.parent)
            self._remember(read_window(self._file.path))
            self._compact()

    def __contains__(self, event_id: object) -> bool:
        with self._lock:
            return event_id in self._ids

    def known(self, event_ids: Iterable[str]) -> set[str]:
        """Those of ``event_ids`` in the window (one look for a whole chunk of events)."""
        with self._lock:
            return self._ids.intersection(event_ids)

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
            if self._file is not None and self._file.is_open:
                self._unwritten.extend(fresh)

    def flush(self) -> None:
        """Put the ids remembered so far on disk (fsync) before their acks go out.

        A write that fails (a full disk) is logged, and the acks go out anyway: held back,
        their events would go to another member once this one looked stuck, and be run
        again for certain, where a window short of them matters only if an ack is lost
        and this process restarts. The next flush rewrites the whole file (the failed
        append may have left part of a line)."""
        with self._lock:
            if self._file is None or self._closed:
                return
            try:
                if self._rewrite_due:
                    self._compact()
                elif self._unwritten:
                    self._file.append([json.dumps(i) for i in self._unwritten], sync=True)
                    if self._file.lines > COMPACT_FACTOR * self.window:
                        self._compact()
            except (OSError, StoreError) as exc:
                if not self._rewrite_due:
                    log.error(
                        "processed-ID window %s not written (%s): acknowledging anyway; "
                        "until it is, a restart may run these events again",
                        self.path,
                        exc,
                    )
                self._rewrite_due = True
                return
            if self._rewrite_due:
                log.warning("processed-ID window %s written again", self.path)
            self._rewrite_due = False
            self._unwritten.clear()

    def _remember(self, event_ids: Iterable[str]) -> list[str]:
        """Add the ids not in the window yet (whole lists at a time: a chunk of events
        adds hundreds), then forget the oldest past the window; returns those added."""
        known = self._ids
        fresh = [event_id for event_id in dict.fromkeys(event_ids) if event_id not in known]
        known.update(fresh)
        self._order.extend(fresh)
        if (excess := len(self._order) - self.window) > 0:
            order = self._order
            known.difference_update([order.popleft() for _ in range(excess)])
        return fresh

    def _compact(self) -> None:
        """Rewrite the file with the live window only (atomically, by rename)."""
        if self._file is not None:
            self._file.rewrite([HEADER, *(json.dumps(i) for i in self._order)])

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()


def read_window(path: Path) -> list[str]:
    """The ids of a window file, oldest first ([] when there is none); StoreError naming
    the file when it is not a window."""
    lines = read_lines(path)
    if lines and lines[0].startswith("{"):
        _check_header(path, lines[0])
        return [_json_id(path, number, line) for number, line in enumerate(lines[1:], 2)]
    return _headerless_ids(path, lines)


def _check_header(path: Path, line: str) -> None:
    try:
        header = json.loads(line)
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise malformed(path, f"line 1 is not the header of a processed-id window ({HEADER})")
    if header.get("version") != FORMAT_VERSION:
        version = header.get("version")
        raise malformed(path, f"window format version {version!r:.20} is not known")


def _json_id(path: Path, number: int, line: str) -> str:
    try:
        value = json.loads(line)
    except ValueError:
        value = None
    if type(value) is not str:
        raise malformed(path, f"line {number} is not an id (a JSON string): {line[:60]!r}")
    return value


def _headerless_ids(path: Path, lines: list[str]) -> list[str]:
    """An older window: one JSON string per line when every line is one, else one bare id
    per line (the whole line, spaces and all). No version wrote some lines one way and
    some the other: such a file was damaged (a header that lost its first byte, say), and
    read as bare ids it would know none of its ids."""
    numbered = [(number, line) for number, line in enumerate(lines, 1) if line]
    decoded = [(number, line, _json_string(line)) for number, line in numbered]
    quoted = [value for _, _, value in decoded if value is not None]
    if len(quoted) == len(decoded):
        return quoted
    if quoted:
        number, line = next((n, line) for n, line, value in decoded if value is None)
        raise malformed(path, f"line {number} is not an id (a JSON string): {line[:60]!r}")
    return [line for _, line in numbered]


def _json_string(line: str) -> str | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if type(value) is str else None
