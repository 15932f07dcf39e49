"""The pull client's journal: the last message received on each topic, and the ones
received before it.

An append-only JSON-lines file, one line per message received, flushed before the message
is shown: a crash of the client loses nothing (the next ``get`` names this id as the last
one) and repeats nothing. A last line torn by a crash is ignored: its message was never
shown, so the broker hands it out again. The file is compacted when opened and every
``COMPACT_LINES`` lines, keeping per topic its last message and the ``WINDOW`` received
before it (as ``{"topic", "seen": "uid@offset"}`` lines).

That window is what lets the client absorb a repeat (:meth:`ReceivedJournal.seen`): a
broker killed within 50 ms of some gets' acks hands those messages out again (it wrote
the acks later), and the client, having got them, acknowledges them again without showing
them. A message is known by its uid and its offset: an id published again after the
channel's dedupe window is a new event, at a new offset.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

from channel_client.statefile import AppendOnlyFile, malformed
from channel_server.events import event_uid

COMPACT_LINES = 10_000
NAMING = ("id", "publisher_id", "offset")
"""The fields of a message the journal keeps: its uid and offset (see :func:`_key`)."""
WINDOW = 1024
"""Messages remembered per topic: far more than a broker gets through in the 50 ms of acks
a crash can lose."""


class ReceivedJournal:
    def __init__(self, path: Path) -> None:
        """Open (or create) the journal ``path``, a plain name in a private directory;
        StoreError names the file when it is not a journal."""
        self._file = AppendOnlyFile(path)
        self.path = self._file.path
        self._last: dict[str, dict[str, Any] | None] = {}
        self._window: dict[str, _Window] = {}
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
            if _is_seen(record):
                self._remember(record["topic"], record["seen"])
                continue
            if not _is_record(record):
                raise malformed(self.path, f"line {number} is not a {{topic, event}} record")
            self._note(record["topic"], record.get("event"))

    def last(self, topic: str) -> dict[str, Any] | None:
        """What names the last message received on ``topic`` (``NAMING``; None: none since
        subscribing)."""
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

    def seen(self, topic: str, event: dict[str, Any]) -> bool:
        """Whether ``event`` was received on ``topic`` already (a repeat to absorb)."""
        window = self._window.get(topic)
        key = _key(event)
        return window is not None and key is not None and key in window.keys

    def record(self, topic: str, event: dict[str, Any] | None) -> None:
        """Remember the message just received (None: forget the topic), on disk: what
        names it, not its payload, which may be bytes (JSON has no such thing: one such
        message stopped every get of its topic for good, session 34's newcomer)."""
        named = None if event is None else {k: event[k] for k in NAMING if k in event}
        self._file.append([json.dumps({"topic": topic, "event": named})])
        self._note(topic, named)
        if self._file.appended >= COMPACT_LINES:
            self._compact()

    def _note(self, topic: str, event: dict[str, Any] | None) -> None:
        self._last[topic] = event
        if event is None:
            self._window.pop(topic, None)
        elif (key := _key(event)) is not None:
            self._remember(topic, key)

    def _remember(self, topic: str, key: str) -> None:
        window = self._window.get(topic)
        if window is None:
            window = self._window[topic] = _Window()
        window.add(key)

    def _compact(self) -> None:
        """Rewrite the journal with each topic's window and last message (atomically, by
        rename)."""
        lines = []
        for topic, event in self._last.items():
            if event is None:
                continue
            window = self._window.get(topic)
            earlier = list(window.order)[:-1] if window is not None else []
            lines += [json.dumps({"topic": topic, "seen": key}) for key in earlier]
            lines.append(json.dumps({"topic": topic, "event": event}))
        self._file.rewrite(lines)

    def close(self) -> None:
        self._file.close()


class _Window:
    """The last WINDOW messages of a topic, by key (uid@offset)."""

    __slots__ = ("keys", "order")

    def __init__(self) -> None:
        self.order: deque[str] = deque()
        self.keys: set[str] = set()

    def add(self, key: str) -> None:
        if key in self.keys:
            self.order.remove(key)  # it comes last now (a repeat absorbed)
        elif len(self.order) >= WINDOW:
            self.keys.discard(self.order.popleft())
        self.order.append(key)
        self.keys.add(key)


def _key(event: dict[str, Any]) -> str | None:
    """A message's key in the window (None: a record too old to have a publisher id)."""
    publisher_id = event.get("publisher_id")
    if type(publisher_id) is not str:
        return None
    return f"{event_uid(publisher_id, event['id'])}@{event.get('offset')}"


def _is_seen(record: Any) -> bool:
    """``{"topic": str, "seen": str}``: a message received before the last."""
    return (
        isinstance(record, dict)
        and type(record.get("topic")) is str
        and type(record.get("seen")) is str
    )


def _is_record(record: Any) -> bool:
    """``{"topic": str, "event": null | {"id": str, ...}}``."""
    if not isinstance(record, dict) or type(record.get("topic")) is not str:
        return False
    event = record.get("event")
    return event is None or (isinstance(event, dict) and type(event.get("id")) is str)
