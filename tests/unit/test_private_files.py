"""Private files: the broker's data dir and SQLite files, the clients' state dirs and files.

Directories are 0700 and files 0600 whatever the umask, a wider existing mode is tightened
(with a warning), state file names are checked before anything is written, and a malformed
state file is a one-line error naming it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from channel_client import statefile
from channel_client.scenario import ScenarioRunner, Step
from channel_client.statefile import StateFile, state_path
from channel_server import wire
from channel_server.errors import InvalidArgument, StoreError
from channel_server.events import Event
from channel_server.store.base import ChannelRecord
from channel_server.store.sqlite import DB_FILE, LOCK_FILE, SQLiteStore
from publisher import cli as publisher_cli
from publisher.state import PublisherState
from subscriber import cli as subscriber_cli
from subscriber.processed import ProcessedIds
from subscriber.received import ReceivedJournal
from subscriber.record import Recorder, read_records

SQLITE_FILES = {DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm", LOCK_FILE}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def modes(directory: Path) -> dict[str, int]:
    return {p.name: mode(p) for p in directory.iterdir()}


def every_path(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    """A usual umask, under which plain open() and mkdir() make 0644 files, 0755 dirs."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


# -- the broker's data dir ---------------------------------------------------------------
def test_the_data_dir_and_every_sqlite_file_are_private(tmp_path: Path) -> None:
    data = tmp_path / "brokers" / "b1"
    store = SQLiteStore(data)
    try:
        store.save_channel(ChannelRecord("c", "queue"))
        store.append("c", [Event("e0", "pub", 0, 0.0, "secret", 0)], 1, accepted_at=0.0)
        found = modes(data)
        assert found == dict.fromkeys(SQLITE_FILES | {"journal-0000000001.log"}, 0o600)
        assert [e.payload for e in store.load("c").events] == ["secret"]
        assert modes(data) == dict.fromkeys(SQLITE_FILES, 0o600) | {
            name: 0o600 for name in modes(data) if name.startswith("journal-")
        }  # WAL and SHM exist; the journal's segment until a round deletes it
        assert mode(data) == 0o700
        assert mode(data.parent) == 0o700  # a parent it had to make, too
    finally:
        store.close()
    assert modes(data) == {DB_FILE: 0o600, LOCK_FILE: 0o600}


def test_a_wider_data_dir_and_database_are_tightened_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    with sqlite3.connect(data / DB_FILE) as db:  # left by an older broker: 0644
        db.execute("CREATE TABLE t(x)")
    db.close()
    assert (mode(data), mode(data / DB_FILE)) == (0o755, 0o644)
    with caplog.at_level(logging.WARNING):
        store = SQLiteStore(data)
    store.close()
    assert f"data dir {data} was 0755; tightened to 0700" in caplog.messages
    assert f"file {data / DB_FILE} was 0644; tightened to 0600" in caplog.messages
    assert mode(data) == 0o700
    assert modes(data) == {DB_FILE: 0o600, LOCK_FILE: 0o600}


def test_a_database_that_is_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere.sqlite"
    (data / DB_FILE).symlink_to(elsewhere)
    with pytest.raises(StoreError, match="symbolic link"):
        SQLiteStore(data)
    assert not elsewhere.exists()
    (data / DB_FILE).unlink()
    SQLiteStore(data).close()  # the failed open let go of the directory's lock


# -- the clients' state dirs and files ----------------------------------------------------
def test_client_state_dirs_and_files_are_private(tmp_path: Path) -> None:
    state = tmp_path / "home" / "state"
    PublisherState(state, "p1").reserve("c", 5)
    window = ProcessedIds(10, state_path(state, "processed", "c", "g", "s1", suffix=".txt"))
    window.add(["e1", "e2"])
    window.flush()
    window.close()
    journal = ReceivedJournal(state / "subscriber-s1.received")
    journal.record("t", {"id": "e1", "payload": "secret"})
    journal.close()
    StateFile(state / "subscriber-s1.json").update(scripts={})
    recorder = Recorder(tmp_path / "record.jsonl", "s1")
    recorder.write({"id": "e1"})
    recorder.close()

    assert modes(state) == {
        "publisher-p1.json": 0o600,
        "publisher-p1.json.lock": 0o600,
        "processed-c-g-s1.txt": 0o600,
        "subscriber-s1.received": 0o600,
        "subscriber-s1.json": 0o600,
        "subscriber-s1.json.lock": 0o600,
    }
    assert (mode(state), mode(state.parent)) == (0o700, 0o700)
    assert mode(tmp_path / "record.jsonl") == 0o600
    assert PublisherState(state, "p1").next_seq("c") == 5  # and they still work
    assert ProcessedIds(10, state / "processed-c-g-s1.txt").recent(5) == ["e1", "e2"]
    assert ReceivedJournal(state / "subscriber-s1.received").last_id("t") == "e1"
    assert [r["id"] for r in read_records(tmp_path / "record.jsonl")] == ["e1"]


def test_wider_client_files_are_tightened_when_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    for name, text in [
        ("publisher-p1.json", '{"seq": {"c": 3}}'),
        ("processed-c-g-s1.txt", '"e1"\n'),
        ("subscriber-s1.received", '{"topic": "t", "event": {"id": "e1"}}\n'),
    ]:
        (state / name).write_text(text)
    record = tmp_path / "record.jsonl"
    record.write_text("")
    assert {*modes(state).values(), mode(record), mode(state)} == {0o644, 0o755}
    with caplog.at_level(logging.WARNING):
        assert PublisherState(state, "p1").next_seq("c") == 3
        ProcessedIds(10, state / "processed-c-g-s1.txt").close()
        ReceivedJournal(state / "subscriber-s1.received").close()
        Recorder(record, "s1").close()
    assert f"state dir {state} was 0755; tightened to 0700" in caplog.messages
    assert f"file {record} was 0644; tightened to 0600" in caplog.messages
    assert mode(state) == 0o700
    assert set(modes(state).values()) == {0o600}
    assert mode(record) == 0o600


def test_a_client_file_is_never_opened_through_a_symbolic_link(tmp_path: Path) -> None:
    target = tmp_path / "someone-elses-file"
    (tmp_path / "record.jsonl").symlink_to(target)
    with pytest.raises(StoreError, match="symbolic link"):
        Recorder(tmp_path / "record.jsonl", "s1")
    assert not target.exists()


# -- names, checked before anything is written --------------------------------------------
@pytest.mark.parametrize(
    "parts",
    [
        ("../x",),
        ("..",),
        (".",),
        ("a/b",),
        ("/etc/passwd",),
        ("a\x00b",),
        ("",),
        ("x" * 129,),
        ("a", None),
    ],
)
def test_state_path_refuses_a_part_that_is_not_a_plain_name(tmp_path: Path, parts) -> None:
    with pytest.raises(InvalidArgument, match="state file name part"):
        state_path(tmp_path / "state", *parts)
    assert every_path(tmp_path) == []


def test_a_plain_name_is_what_the_wire_takes_as_a_name() -> None:
    assert statefile.NAME_PART_RE.pattern == wire.NAME_PATTERN


def test_state_path_joins_plain_parts_and_refuses_a_link_out(tmp_path: Path) -> None:
    assert state_path(tmp_path, "a..b", "c", suffix=".txt") == tmp_path / "a..b-c.txt"
    (tmp_path / "out.json").symlink_to(tmp_path.parent / "out.json")
    with pytest.raises(InvalidArgument, match="out of its directory"):
        state_path(tmp_path, "out.json")


def test_a_publisher_id_that_is_not_a_plain_name_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument):
        PublisherState(tmp_path / "state", "../../x")
    assert every_path(tmp_path) == []


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--group", "../../../x"), ("--channel", "../x"), ("--id", "a/b"), ("--group", "x\x00y")],
)
def test_subscriber_run_refuses_a_name_out_of_the_state_dir_before_any_write(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
) -> None:
    cwd = tmp_path / "a" / "b" / "c"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    names = {"--channel": "c", "--id": "s1", "--group": "g", flag: value}
    argv = ["run", *(x for item in names.items() for x in item)]
    with pytest.raises(SystemExit) as stopped:
        subscriber_cli.main([*argv, "--state-dir", "sd", "--record", "r.jsonl"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument {flag}: {value!r}" in err, err
    assert every_path(tmp_path) == [tmp_path / "a", cwd.parent, cwd]  # nothing written


@pytest.mark.parametrize(
    "argv",
    [
        ["publisher", "publish", "--channel", "c", "--id", "../x", "--count", "1"],
        ["publisher", "publish", "--channel", "../c", "--id", "p1", "--count", "1"],
        ["publisher", "put", "--id", "../x", "t", "m"],
        ["publisher", "put", "--id", "p1", "../t", "m"],
        ["subscriber", "get", "--id", "../x", "t"],
        ["subscriber", "subscribe", "--id", "s1", "--group", "a/b", "t"],
        ["subscriber", "script", "--id", "a/b", "s.yaml"],
    ],
)
def test_client_commands_refuse_a_name_when_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    main = {"publisher": publisher_cli.main, "subscriber": subscriber_cli.main}[argv[0]]
    with pytest.raises(SystemExit) as stopped:
        main([*argv[1:], "--state-dir", str(tmp_path / "state"), "--ns-port", "1"])
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "error: argument" in line and "must be 1-128 characters of [A-Za-z0-9._-]" in line
    assert every_path(tmp_path) == []


def test_the_window_file_keeps_its_name(tmp_path: Path) -> None:
    args = argparse.Namespace(state_dir=tmp_path, group=None, channel="c", subscriber_id="s1")
    assert subscriber_cli._window_file(args) == tmp_path / "processed-c-auto-s1.txt"


# -- malformed state files: one line naming the file --------------------------------------
def assert_one_line_naming(error: BaseException, path: Path) -> None:
    text = str(error)
    assert "\n" not in text and str(path) in text and "fix or remove it" in text, text


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'{"seq": {"c": 3',
        b"[1, 2]",
        b'"a string"',
        b'{"seq": [1]}',
        b'{"seq": {"c": "7"}}',
        b'{"seq": {"c": -1}}',
        b'{"pending_put": 5}',
        b'{"pending_put": {"topic": "t"}}',
        b'{"pending_put": {"topic": 5, "event": {"id": "e1"}}}',
        b'{"pending_put": {"topic": "t", "event": {"payload": 1}}}',
        b'{"pending_put": {"topic": "t", "event": {"id": 7}}}',
        b"\xff\xfe\x00\x01\x89PNG garbage",
    ],
)
def test_a_malformed_publisher_state_file_is_a_one_line_error(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "publisher-p1.json"
    path.write_bytes(content)
    state = PublisherState(tmp_path, "p1")
    for read in (lambda: state.next_seq("c"), state.pending_put):
        with pytest.raises(StoreError) as caught:
            read()
        assert_one_line_naming(caught.value, path)


@pytest.mark.parametrize(
    "content",
    [
        b"[1]\n",
        b'{"event": {"id": "e1"}}\n',
        b'{"topic": "t", "event": 5}\n',
        b'{"topic": "t", "event": {"payload": 1}}\n',
        b'{"topic": "t", "event": null}\n\xff\xfe\n',
        b'{"topic": "t", "ev\n{"topic": "t", "event": null}\n',  # truncated, not the last
        b'{"topic": "t", "event": null}\n\n',
        b'"a string"\n',
    ],
)
def test_a_malformed_received_journal_is_a_one_line_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "subscriber-s1.received"
    path.write_bytes(content)
    with pytest.raises(StoreError) as caught:
        ReceivedJournal(path)
    assert_one_line_naming(caught.value, path)
    assert path.read_bytes() == content  # left as it was, for a look


def test_a_journal_line_torn_by_a_crash_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "subscriber-s1.received"
    path.write_bytes(b'{"topic": "t", "event": {"id": "e1"}}\n{"topic": "t", "event": {"id')
    assert ReceivedJournal(path).last_id("t") == "e1"


def test_malformed_scenario_progress_is_a_one_line_error(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("steps: []\n")
    state = StateFile(tmp_path / "state.json")
    runner = ScenarioRunner(scenario, [Step(1, "t", "get")], state, threading.Event())
    progress = {"digest": runner._digest, "done": "3"}
    for scripts in ([1], {runner._key: 3}, {runner._key: progress}):
        state.path.write_text(json.dumps({"scripts": scripts}))
        with pytest.raises(StoreError) as caught:
            runner.run(lambda step, n: None)
        assert_one_line_naming(caught.value, state.path)


def test_the_clients_report_a_malformed_state_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "publisher-p1.json").write_text("{")
    (tmp_path / "subscriber-s1.received").write_text('["not", "a", "record"]\n')
    common = ["--state-dir", str(tmp_path), "--attempts", "1", "--timeout", "0.1"]
    assert publisher_cli.main(["put", "--id", "p1", *common, "t", "m"]) != 0
    assert subscriber_cli.main(["get", "--id", "s1", *common, "t"]) != 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("error: ") and "publisher-p1.json: not a JSON" in lines[0]
    assert lines[1].startswith("error: ") and "subscriber-s1.received: line 1" in lines[1]


def test_a_data_dir_in_a_directory_anyone_may_write_is_refused(tmp_path: Path) -> None:
    """A user who made ``pubsub-data`` first (anyone may write it) moved a broker's data
    dir out of it while the broker was stopped, and the broker came back empty (session
    33's attacker probe). A sticky directory, as /tmp is, lets nobody rename what is not
    theirs."""
    shared = tmp_path / "pubsub-data"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(StoreError, match=r"anyone may write .*pubsub-data, and so move it"):
        SQLiteStore(shared / "b1")
    shared.chmod(0o777 | stat.S_ISVTX)
    SQLiteStore(shared / "b1").close()
