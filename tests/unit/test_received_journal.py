"""The pull client's journal of last messages: survives a crash, ignores a torn line."""

from __future__ import annotations

from pathlib import Path

import pytest

from subscriber import received
from subscriber.received import ReceivedJournal


def event(i: int) -> dict:
    return {"id": f"p-{i}", "payload": f"m{i}"}


def test_the_last_message_per_topic_survives_reopening(tmp_path: Path) -> None:
    journal = ReceivedJournal(tmp_path / "s.received")
    journal.record("a", event(1))
    journal.record("a", event(2))
    journal.record("b", event(3))
    journal.record("b", None)  # unsubscribed
    # no close(): as if the process died here
    again = ReceivedJournal(tmp_path / "s.received")
    assert again.last_id("a") == "p-2"
    assert again.last("a") == event(2)
    assert again.last_id("b") is None
    assert again.last_id("never") is None


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s.received"
    journal = ReceivedJournal(path)
    journal.record("a", event(1))
    journal.close()
    with path.open("a") as f:
        f.write('{"topic": "a", "event": {"id": "p-')  # a crash in the middle of a write
    assert ReceivedJournal(path).last_id("a") == "p-1"


def test_the_journal_is_compacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(received, "COMPACT_LINES", 5)
    path = tmp_path / "s.received"
    journal = ReceivedJournal(path)
    for i in range(12):
        journal.record("a", event(i))
    assert len(path.read_text().splitlines()) < 5
    journal.close()
    assert ReceivedJournal(path).last_id("a") == "p-11"
    with pytest.raises(ValueError, match="closed"):
        journal.record("a", event(99))
