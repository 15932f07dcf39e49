"""The SQLite store's publish journal: records, the rows waiting in it, and what a crash
leaves (real files, a real crash of a child process)."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from channel_server.errors import StoreError
from channel_server.events import Event
from channel_server.store import journal as journal_module
from channel_server.store import sqlite as sqlite_store
from channel_server.store.base import ChannelRecord
from channel_server.store.journal import (
    DAMAGED_SUFFIX,
    Journal,
    pack_record,
    read_records,
    segments,
)
from channel_server.store.journaled import JournaledEvents
from channel_server.store.sqlite import SQLiteStore


def ev(offset: int, payload: object = "x") -> Event:
    return Event(f"e{offset}", "pub", 0, float(offset), payload, offset)


def row(offset: int) -> Event:
    return Event(f"e{offset}", "pub", 0, float(offset), "x", offset, 1, 1.0)


# -- records ------------------------------------------------------------------------------
def test_records_read_back_in_order_and_a_torn_tail_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal(tmp_path, sync=False)
    first = journal.append(pack_record(1 << 40, 2, [row(0), row(1)]))
    journal.append(pack_record(1 << 40, 3, [row(2)]))
    journal.append(pack_record(1 << 40, 4, [row(3)]))
    journal.close()
    ((number, path),) = segments(tmp_path)
    assert number == first
    path.write_bytes(path.read_bytes()[:-3])  # the last write torn by a power loss
    with caplog.at_level(logging.WARNING):
        records = list(read_records(path))
    assert [r[1] for r in records] == [2, 3]
    assert [msgspec.structs.astuple(e) for e in records[0][2]] == [
        msgspec.structs.astuple(row(0)),
        msgspec.structs.astuple(row(1)),
    ]
    assert "a torn record at byte" in caplog.text


def test_a_damaged_record_stops_the_reading_there(tmp_path: Path) -> None:
    journal = Journal(tmp_path, sync=False)
    journal.append(pack_record(1 << 40, 1, [row(0)]))
    journal.append(pack_record(1 << 40, 2, [row(1)]))
    journal.close()
    ((_, path),) = segments(tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the second record's body no longer matches its CRC
    path.write_bytes(bytes(data))
    assert [r[1] for r in read_records(path)] == [1]


def test_segments_are_numbered_past_every_earlier_one(tmp_path: Path) -> None:
    journal = Journal(tmp_path, sync=False, after=7)
    assert journal.append(pack_record(1 << 40, 1, [row(0)])) == 8
    journal.rotate()
    assert journal.append(pack_record(1 << 40, 2, [row(1)])) == 9
    journal.close()
    assert [n for n, _ in segments(tmp_path)] == [8, 9]
    assert Journal(tmp_path, sync=False).append(pack_record(1 << 40, 3, [row(2)])) == 10


def offsets(events: list[Event]) -> list[int]:
    return [ev.offset for ev in events]


# -- rows waiting -------------------------------------------------------------------------
def test_rows_are_taken_by_offset_and_the_rest_named() -> None:
    rows = JournaledEvents()
    rows.add("c", 1, 0.0, [row(0), row(1), row(2)])
    taken, elsewhere = rows.take("c", [2, 0, 9])
    assert offsets(taken) == [2, 0]
    assert elsewhere == [9]
    assert rows.count("c") == 1
    assert rows.take("other", [1]) == ([], [1])


def test_older_rows_move_and_a_failed_round_puts_them_back() -> None:
    rows = JournaledEvents()
    rows.add("c", 1, 0.0, [row(0), row(1)])
    rows.add("c", 2, 5.0, [row(2)])
    moving = rows.take_older(1.0)
    assert {c: offsets(evs) for c, evs in moving.items()} == {"c": [0, 1]}
    assert rows.count("c") == 1
    rows.put_back("c", moving["c"])
    assert rows.count("c") == 3
    assert offsets(rows.take_older(None)["c"]) == [0, 1, 2]


def test_a_segment_is_idle_once_no_row_of_it_waits() -> None:
    rows = JournaledEvents()
    rows.add("c", 1, 0.0, [row(0), row(1)])
    rows.add("d", 1, 0.0, [row(0)])
    rows.add("c", 2, 0.0, [row(2)])
    assert rows.idle_segments([1, 2]) == []
    rows.take("c", [0, 1])
    assert rows.idle_segments([1, 2]) == []  # d's row of segment 1 still waits
    rows.take("d", [0])
    assert rows.idle_segments([1, 2]) == [1]
    rows.take_older(None)
    assert rows.idle_segments([2]) == [2]


def test_payloads_waiting_are_read_from_the_rows() -> None:
    rows = JournaledEvents()
    rows.add("c", 1, 0.0, [row(0), row(1)])
    assert rows.payloads("c", [1, 5]) == {1: "x"}


# -- the store ------------------------------------------------------------------------------
def journal_files(data: Path) -> list[str]:
    return [p.name for _, p in segments(data)]


def db_rows(data: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(data / "channels.sqlite") as db:
        return db.execute(sql).fetchall()


def test_a_publish_is_a_journal_record_and_acked_events_never_become_rows(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    store = SQLiteStore(data)
    try:
        store.save_channel(ChannelRecord("c", "queue"))
        store.append("c", [ev(0, {"k": 1}), ev(1)], next_offset=5, accepted_at=3.0)
        assert journal_files(data) != []
        assert db_rows(data, "SELECT COUNT(*) FROM events") == [(0,)]
        assert store.count("c") == 2
        assert store.payloads("c", [0]) == {0: {"k": 1}}
        store.delete("c", [0, 1])
        snap = store.load("c")  # the deletes are written first: both resolved
        assert snap.events == []
        assert snap.delivered == [("pub", "e0", 3.0), ("pub", "e1", 3.0)]
        assert snap.next_offset == 5  # a gap kept, though no row holds it
        assert db_rows(data, "SELECT COUNT(*) FROM events") == [(0,)]
        assert db_rows(data, "SELECT COUNT(*) FROM delivered_runs") == [(1,)]
    finally:
        store.close()
    assert journal_files(data) == []  # a clean close leaves no segment
    store = SQLiteStore(data)
    try:
        snap = store.load("c")
        assert (snap.events, snap.next_offset) == ([], 5)
        assert [i for _, i, _ in snap.delivered] == ["e0", "e1"]
    finally:
        store.close()


def test_events_waiting_too_long_become_rows(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "data")
    try:
        store.append("c", [ev(0), ev(1)], next_offset=2, accepted_at=0.0)
        store.delete("c", [0])
        snap = store.load("c")  # a load moves every journaled event: e1 is a row now
        assert [e.id for e in snap.events] == ["e1"]
        assert db_rows(tmp_path / "data", "SELECT key & 255 FROM events") == [(1,)]
        store.delete("c", [1])  # deleted as a row: its id copied into the window
        assert store.load("c").events == []
        assert db_rows(tmp_path / "data", "SELECT key & 255 FROM delivered") == [(1,)]
    finally:
        store.close()


def test_a_trim_forgets_the_oldest_ids_of_runs_and_rows_alike(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "data")
    try:
        store.append("c", [ev(n) for n in range(5)], next_offset=5, accepted_at=1.0)
        store.delete("c", [4, 0, 2])
        store.load("c")  # 0, 2, 4 resolved into a run; 1 and 3 moved into rows
        store.append("c", [ev(n) for n in range(5, 8)], next_offset=8, accepted_at=2.0)
        store.delete("c", [1, 5, 6, 7])
        assert [e.id for e in store.load("c").events] == ["e3"]
        store.trim_delivered("c", 5)
        assert [i for _, i, _ in store.load("c").delivered] == ["e5", "e6", "e7"]
        store.trim_delivered("c", 10)  # more than it holds: every id goes
        snap = store.load("c")
        assert (snap.delivered, snap.next_offset) == ([], 8)
        assert db_rows(tmp_path / "data", "SELECT COUNT(*) FROM delivered_runs") == [(0,)]
    finally:
        store.close()


CRASH = """
import os, sys
from channel_server.errors import StoreError
from channel_server.events import Event
from channel_server.store import journal as journal_module
from channel_server.store import sqlite as sqlite_store
from channel_server.store.sqlite import SQLiteStore
from tests.integration.procs import wait_until
from tests.unit.test_journal import db_rows, ev
data = sys.argv[1]
store = SQLiteStore(data)
store.append("c", [ev(0), ev(1)], 2, 7.0)
store.delete("c", [0])
if sys.argv[2] == "after-round":  # the background round resolves e0 first
    wait_until(
        lambda: db_rows(store.path.parent, "SELECT COUNT(*) FROM delivered_runs") == [(1,)],
        timeout_s=10.0,
        what="e0 resolved",
    )
os._exit(0)  # a crash: no close
"""


@pytest.mark.parametrize("when", ["before-round", "after-round"])
def test_a_crash_replays_the_journal_but_not_what_was_acknowledged(
    tmp_path: Path, when: str
) -> None:
    """Before the round, e0's delete is lost with the crash (it comes back to be
    redelivered, as deferred deletes always could); after it, only e1 comes back."""
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-c", CRASH, str(data), when], check=True, cwd=Path.cwd())
    assert journal_files(data) != []
    store = SQLiteStore(data)
    try:
        assert journal_files(data) == []  # replayed, then deleted
        snap = store.load("c")
        expected = ["e0", "e1"] if when == "before-round" else ["e1"]
        assert [e.id for e in snap.events] == expected
        assert [i for _, i, _ in snap.delivered] == ["e0", "e1"]
        assert snap.next_offset == 2
    finally:
        store.close()


def test_the_bytes_waiting_are_counted_as_events_come_and_go() -> None:
    rows = JournaledEvents()
    rows.add("c", 1, 0.0, [row(0), row(1), row(2)])  # size 1 each
    assert rows.bytes == 3
    taken, _ = rows.take("c", [0])
    assert rows.bytes == 2
    rows.put_back("c", taken)
    assert rows.bytes == 3
    rows.take_older(None)
    assert rows.bytes == 0


def test_publishes_are_rows_at_once_while_too_much_waits_in_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Subscribers not keeping up: the journal would only hold payloads until a move."""
    monkeypatch.setattr(sqlite_store, "JOURNAL_MEMORY_BYTES", 150)
    data = tmp_path / "data"
    store = SQLiteStore(data)
    try:
        big = [msgspec.structs.replace(ev(n, "p" * 100), size=102) for n in (0, 1)]
        store.append("c", big, next_offset=2, accepted_at=0.0)
        assert db_rows(data, "SELECT COUNT(*) FROM events") == [(0,)]  # journaled
        store.append("c", [ev(2), ev(3)], next_offset=7, accepted_at=1.0)
        assert db_rows(data, "SELECT key & 255 FROM events") == [(2,), (3,)]  # rows at once
        assert store.count("c") == 4
        snap = store.load("c")
        assert [e.id for e in snap.events] == ["e0", "e1", "e2", "e3"]
        assert snap.next_offset == 7
    finally:
        store.close()


def test_a_round_that_fails_leaves_every_journaled_event_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its transaction rolled back: the events it took are put back, its segments stay,
    and the next round writes what the failed one would have."""
    data = tmp_path / "data"
    store = SQLiteStore(data)
    real = sqlite_store.keep_journaled_ids
    failing = [True]

    def fails_once(*args: object) -> None:
        if failing.pop() if failing else False:
            raise sqlite3.OperationalError("disk I/O error")
        real(*args)  # type: ignore[arg-type]

    try:
        store._stop.set()  # no background round: this test runs them
        store._maintainer.join()  # type: ignore[union-attr]
        monkeypatch.setattr(sqlite_store, "keep_journaled_ids", fails_once)
        store.append("c", [ev(0), ev(1)], next_offset=2, accepted_at=1.0)
        store.delete("c", [0])
        with pytest.raises(StoreError, match="disk I/O error"):
            store._write_deferred()
        assert store.count("c") == 1  # e0's delete still waits, e1 is stored
        assert journal_files(data) != []
        store.delete("c", [1])
        store._write_deferred()  # both resolved now
        assert db_rows(data, "SELECT COUNT(*) FROM events") == [(0,)]
        store._write_deferred()  # the segment is idle: marked done and deleted
        assert journal_files(data) == []
        snap = store.load("c")
        assert snap.events == []
        assert [i for _, i, _ in snap.delivered] == ["e0", "e1"]
    finally:
        store.close()


def test_a_failed_journal_write_ends_its_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record cut short (a full disk) is its segment's last: replay reads up to it, and
    the publishes after it go to a new segment, whole."""
    data = tmp_path / "data"
    store = SQLiteStore(data)
    real_write = journal_module.os.write

    def short_write(fd: int, data: bytes) -> int:
        return real_write(fd, data[: len(data) // 2])

    try:
        store._stop.set()  # no background round: what is written stays in the journal
        store._maintainer.join()  # type: ignore[union-attr]
        store.append("c", [ev(0)], next_offset=1, accepted_at=1.0)
        monkeypatch.setattr(journal_module.os, "write", short_write)
        with pytest.raises(StoreError, match="journal write failed"):
            store.append("c", [ev(1)], next_offset=2, accepted_at=1.0)
        monkeypatch.undo()
        store.append("c", [ev(2)], next_offset=3, accepted_at=1.0)
        assert len(journal_files(data)) == 2
        reopened = subprocess.run(  # another process reads what a crash would leave
            [sys.executable, "-c", REPLAY, str(data)], capture_output=True, text=True
        )
        assert reopened.stdout.split() == ["e0", "e2"], reopened.stderr
    finally:  # a crash: nothing written on close
        store._journal.close()
        store._db.close()
        store._lock_file.close()


REPLAY = """
import shutil, sys, tempfile
from pathlib import Path
from channel_server.store.sqlite import SQLiteStore
copy = Path(tempfile.mkdtemp()) / "data"
shutil.copytree(sys.argv[1], copy, ignore=shutil.ignore_patterns("broker.lock"))
store = SQLiteStore(copy)
print(*[e.id for e in store.load("c").events])
store.close()
"""


def test_a_segment_that_cannot_be_deleted_keeps_its_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The round goes on (its thread must not die), and the segment stays marked done, so
    a restart deletes it instead of replaying it."""
    data = tmp_path / "data"
    store = SQLiteStore(data)

    def refuse(number: int) -> None:
        raise PermissionError(f"segment {number}: permission denied")

    try:
        store._stop.set()  # no background round: this test runs them
        store._maintainer.join()  # type: ignore[union-attr]
        store.append("c", [ev(0)], next_offset=1, accepted_at=1.0)
        store.delete("c", [0])
        store._write_deferred()  # e0 resolved
        monkeypatch.setattr(store._journal, "remove", refuse)
        with caplog.at_level(logging.WARNING):
            store._write_deferred()  # the segment is idle: marked, but not deleted
            store._write_deferred()
        assert "not deleted" in caplog.text
        assert journal_files(data) == ["journal-0000000001.log"]
        assert db_rows(data, "SELECT segment FROM journal_done") == [(1,)]
    finally:
        store.close()
    store = SQLiteStore(data)  # deletes it, replaying nothing
    try:
        assert journal_files(data) == []
        assert store.load("c").events == []
    finally:
        store.close()


def test_a_segment_damaged_on_disk_is_replayed_up_to_the_damage_said_and_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A torn tail is a crash's (its publish never returned); a whole record whose CRC no
    longer matches was accepted and is lost: said as an error, with the segment kept for a
    look instead of deleted (it was deleted, and the damage logged as a warning in bytes)."""
    data = tmp_path / "data"
    subprocess.run(
        [sys.executable, "-c", CRASH, str(data), "before-round"], check=True, cwd=Path.cwd()
    )
    ((_, path),) = [(n, p) for n, p in segments(data) if p.stat().st_size]
    damaged = bytearray(path.read_bytes())
    damaged[-1] ^= 0xFF  # the one record's body no longer matches its CRC
    path.write_bytes(bytes(damaged))
    with caplog.at_level(logging.WARNING):
        store = SQLiteStore(data)
    try:
        assert [p.name for p in data.iterdir() if p.name.endswith(DAMAGED_SUFFIX)] == [
            path.name + DAMAGED_SUFFIX
        ]
        assert journal_files(data) == []
        assert "is damaged at byte 0" in caplog.text and "are lost" in caplog.text
        assert store.load("c").events == []
    finally:
        store.close()
