"""A credentials file that is not one is a one-line error naming it, when the command
starts (not a traceback in the first thread that opens a proxy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from channel_server.credentials import CREDENTIALS_ENV, Credential, from_file
from channel_server.errors import InvalidArgument
from publisher import cli as publisher_cli

MALFORMED = [
    (b"user: alice\npassword: [unclosed\n", "not valid YAML at line 3"),
    (b'{"user": "alice", "password": "s3', "not valid YAML"),
    (b"- alice\n- s3cret\n", "needs 'user' and 'password'"),
    (b"user: alice\n", "needs 'user' and 'password'"),
    (b"user: 42\npassword: s3cret\n", "must be non-empty strings"),
    (b"user: alice\npassword: 1234\n", "must be non-empty strings"),
    (b"user: alice\npassword: [a, b]\n", "must be non-empty strings"),
    (b"user: alice\npassword: ''\n", "must be non-empty strings"),
    (b"\xff\xfe\x00\x01\x89PNG garbage", "not a text file"),
]


@pytest.fixture(autouse=True)
def no_credentials_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI sets $PUBSUB_CREDENTIALS for its proxies; put it back after each test."""
    monkeypatch.setenv(CREDENTIALS_ENV, "")
    monkeypatch.delenv(CREDENTIALS_ENV)


def test_a_credentials_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "alice.yaml"
    path.write_text("user: alice\npassword: 's3cret: 1234'\n")
    assert from_file(path) == Credential("alice", "s3cret: 1234")


@pytest.mark.parametrize(("content", "reason"), MALFORMED)
def test_a_malformed_credentials_file_is_a_one_line_error(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "creds.yaml"
    path.write_bytes(content)
    with pytest.raises(InvalidArgument) as caught:
        from_file(path)
    text = str(caught.value)
    assert "\n" not in text and str(path) in text and reason in text, text


def test_a_missing_credentials_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"creds\.yaml: cannot read it \(No such file"):
        from_file(tmp_path / "creds.yaml")


@pytest.mark.parametrize("by_env", [False, True])
def test_a_command_with_a_malformed_credentials_file_stops_at_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    by_env: bool,
) -> None:
    path = tmp_path / "creds.yaml"
    path.write_bytes(b"\xff\xfe garbage")
    state = tmp_path / "state"
    argv = ["publish", "--channel", "c", "--id", "p1", "--count", "1", "--ns-port", "1"]
    argv += ["--state-dir", str(state)]
    if by_env:
        monkeypatch.setenv(CREDENTIALS_ENV, str(path))
    else:
        argv += ["--credentials", str(path)]
    with pytest.raises(SystemExit) as stopped:
        publisher_cli.main(argv)
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"error: credentials: {path}: not a text file"]
    assert not state.exists()  # before anything was written
