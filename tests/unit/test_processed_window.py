"""The subscriber's processed-ID window on disk: ids survive a restart exactly as they
were, whatever characters they hold; older files are still read; a file that is not a
window is a one-line error naming it, never a traceback or a guess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channel_server.errors import InvalidArgument, StoreError
from subscriber import cli as subscriber_cli
from subscriber.processed import HEADER, ProcessedIds

HOSTILE_IDS = [
    "evil PUB-7",
    "line\nPUB-8",
    "cr\rPUB-9",
    "tab\tPUB-10",
    "sep\u2028PUB-11",
    "nul\x00PUB-12",
    '"PUB-13"',
    "42",
    "null",
    HEADER,
    "back\\slash",
    "ünïcødé 事件 🎉",
    "lone \udc80 surrogate",
    " padded ",
]
FRAGMENTS = ["evil", "PUB-7", "line", "PUB-8", "cr", "PUB-9", "PUB-13", "padded", 42]


def window_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "processed-c-auto-s1.txt"


def restarted(path: Path, window: int = 100) -> ProcessedIds:
    return ProcessedIds(window, path)


@pytest.mark.parametrize("compact_between", [False, True])
def test_every_id_survives_a_restart_whole(tmp_path: Path, compact_between: bool) -> None:
    path = window_path(tmp_path)
    first = ProcessedIds(100, path)
    first.add(HOSTILE_IDS)
    first.flush()  # appended lines
    first.close()
    if compact_between:  # opening rewrites the file (the compacted form)
        restarted(path).close()

    again = restarted(path)
    assert again.recent(100) == HOSTILE_IDS
    assert not any(fragment in again for fragment in FRAGMENTS)


def test_evil_id_does_not_mark_another_as_processed_after_a_restart(tmp_path: Path) -> None:
    path = window_path(tmp_path)
    window = ProcessedIds(100, path)
    window.add(["evil PUB-7"])
    window.flush()
    window.close()
    again = restarted(path)
    assert "evil PUB-7" in again
    assert "PUB-7" not in again and "evil" not in again
    assert path.read_text().splitlines() == [HEADER, json.dumps("evil PUB-7")]


def test_the_window_keeps_its_size_across_compactions(tmp_path: Path) -> None:
    path = window_path(tmp_path)
    window = ProcessedIds(3, path)
    for n in range(10):
        window.add([f"e {n}"])
        window.flush()
    window.close()
    assert restarted(path, 3).recent(10) == ["e 7", "e 8", "e 9"]
    assert len(path.read_text().splitlines()) == 1 + 3


@pytest.mark.parametrize(
    ("content", "ids"),
    [
        # the oldest format: one bare id per line, the whole line (it used to be split)
        ("PUB-1\nevil PUB-7\n42\n[1,2\n", ["PUB-1", "evil PUB-7", "42", "[1,2"]),
        ("a\rb\n", ["a\rb"]),
        # the next: one JSON string per line, without a header
        ('"PUB-1"\n"evil PUB-7"\n"line\\nbreak"\n', ["PUB-1", "evil PUB-7", "line\nbreak"]),
        ("", []),
    ],
)
def test_older_window_files_are_read_and_upgraded(
    tmp_path: Path, content: str, ids: list[str]
) -> None:
    path = window_path(tmp_path)
    path.parent.mkdir(mode=0o700)
    path.write_bytes(content.encode())
    window = restarted(path)
    assert window.recent(10) == ids
    window.close()
    assert path.read_text().splitlines() == [HEADER, *map(json.dumps, ids)]
    assert restarted(path).recent(10) == ids


def test_a_last_line_torn_by_a_crash_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = window_path(tmp_path)
    path.parent.mkdir(mode=0o700)
    path.write_text(f'{HEADER}\n"PUB-1"\n"PUB-2')
    assert restarted(path).recent(10) == ["PUB-1"]
    assert any("torn by a crash" in message for message in caplog.messages)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (f"{HEADER}\n42\n".encode(), "line 2 is not an id"),
        (f'{HEADER}\n"PUB-1"\n["PUB-2"]\n'.encode(), "line 3 is not an id"),
        (f'{HEADER}\n"PUB-1\n"PUB-2"\n'.encode(), "line 2 is not an id"),  # truncated JSON
        (f"{HEADER}\n{{}}\n".encode(), "line 2 is not an id"),
        (f"{HEADER}\n\n".encode(), "line 2 is not an id"),
        (b'{"format": "pubsub-processed-ids"\n"PUB-1"\n', "line 1 is not the header"),
        (b'{"format": "something-else", "version": 2}\n', "line 1 is not the header"),
        (b'{"format": "pubsub-processed-ids", "version": 3}\n', "version 3 is not known"),
        (b"\xff\xfe\x00\x01\x89PNG garbage\n", "not a text file"),
        # the header lost its first byte: read as bare ids, it knew none of them
        (b'"format": "pubsub-processed-ids", "version": 1}\n"P/PUB-1"\n', "line 1 is not an id"),
        (b'"P/PUB-1"\nP/PUB-2\n', "line 2 is not an id"),
    ],
)
def test_a_malformed_window_is_a_one_line_error_naming_the_file(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = window_path(tmp_path)
    path.parent.mkdir(mode=0o700)
    path.write_bytes(content)
    with pytest.raises(StoreError) as caught:
        restarted(path)
    text = str(caught.value)
    assert "\n" not in text and str(path) in text and reason in text, text
    assert path.read_bytes() == content  # left as it was, for a look


def test_a_window_path_that_leads_out_of_its_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "w.txt").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(InvalidArgument, match="out of its directory"):
        ProcessedIds(10, tmp_path / "state" / "w.txt")
    assert not (tmp_path / "elsewhere.txt").exists()


def test_subscriber_run_reports_a_malformed_window_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = window_path(tmp_path)
    path.parent.mkdir(mode=0o700)
    path.write_text(f"{HEADER}\n[1, 2]\n")
    record = tmp_path / "record.jsonl"
    argv = ["run", "--channel", "c", "--id", "s1", "--state-dir", str(path.parent)]
    assert subscriber_cli.main([*argv, "--record", str(record), "--ns-port", "1"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: store {path}: line 2 is not an id (a JSON string): '[1, 2]'; fix or remove it"
    ]
    assert not record.exists()  # refused before anything else was opened


@given(
    window=st.integers(1, 6),
    batches=st.lists(st.lists(st.sampled_from("abcdefghij"), max_size=8), max_size=12),
)
def test_the_window_holds_the_newest_distinct_ids_whatever_the_batches(
    window: int, batches: list[list[str]]
) -> None:
    """Ids added a chunk at a time, repeats and all, leave the window as one id at a time
    would: the ``window`` most recently first-seen ids still held, oldest first."""
    ids = ProcessedIds(window)
    held: list[str] = []
    for batch in batches:
        ids.add(batch)
        for event_id in batch:
            if event_id not in held:
                held.append(event_id)
        held = held[-window:]
    assert ids.recent(window) == held
    assert len(ids) == len(held)
    assert all(event_id in ids for event_id in held)


def test_a_full_disk_delays_the_window_file_and_never_the_acks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The flush before an ack: a write refused by the disk (the kernel's own ENOSPC, from
    /dev/full) is logged, not raised into the thread that sends the acks (which died of it);
    the next flush rewrites the whole window, so no id is lost and no torn line stays."""
    path = window_path(tmp_path)
    window = ProcessedIds(100, path)
    window.add(["a", "b"])
    window.flush()
    appending = window._file._file  # the open file the appends go to
    window._file._file = open("/dev/full", "a")  # noqa: SIM115 (closed by the rewrite)
    window.add(["c"])
    window.flush()  # refused by the disk: no exception
    assert "processed-ID window" in caplog.text and "No space left" in caplog.text
    appending.close()
    window.add(["d"])
    window.flush()  # the whole window written anew
    window.close()
    assert restarted(path).recent(100) == ["a", "b", "c", "d"]
