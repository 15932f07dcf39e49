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
    assert again.last("a") == {"id": "p-2"}  # what names it: its payload is not kept
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


def message(i: int, offset: int) -> dict:
    return {"id": f"p-{i}", "publisher_id": "P", "offset": offset, "payload": f"m{i}"}


def test_messages_got_before_are_known_across_reopening_and_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lets a client absorb the repeats a killed broker hands out: a window of what
    it got, per topic, kept when the journal is compacted (at every open)."""
    monkeypatch.setattr(received, "WINDOW", 3)
    path = tmp_path / "s.received"
    journal = ReceivedJournal(path)
    for i in range(1, 6):
        journal.record("a", message(i, 10 + i))
    journal.record("b", message(9, 99))
    assert journal.seen("a", message(5, 15)) and journal.seen("a", message(3, 13))
    assert not journal.seen("a", message(2, 12))  # out of the window of 3
    assert not journal.seen("a", message(5, 50))  # the same id again, a new event
    assert not journal.seen("b", message(5, 15))  # another topic's
    again = ReceivedJournal(path)  # compacted as it opens
    assert [again.seen("a", message(i, 10 + i)) for i in range(1, 6)] == [0, 0, 1, 1, 1]
    assert again.last_id("a") == "p-5" and again.seen("b", message(9, 99))
    assert len(path.read_text().splitlines()) == 3 + 1  # a's window and b's last
    again.record("a", None)  # unsubscribed: forgotten
    assert not ReceivedJournal(path).seen("a", message(5, 15))


def test_a_message_with_a_bytes_payload_is_recorded(tmp_path: Path) -> None:
    """JSON has no bytes: recording one raised TypeError, so the client never got past
    that message (session 34's newcomer)."""
    journal = ReceivedJournal(tmp_path / "s.received")
    raw = {"id": "p-1", "publisher_id": "p", "offset": 7, "payload": b"\x00raw"}
    journal.record("a", raw)
    assert journal.seen("a", raw)
    again = ReceivedJournal(tmp_path / "s.received")
    assert (again.last_uid("a"), again.seen("a", raw)) == ("p/p-1", True)
