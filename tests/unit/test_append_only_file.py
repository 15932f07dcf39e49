"""AppendOnlyFile, the file under the subscriber's processed-ID window and the pull client's
journal: lines appended and counted, a rewrite that replaces them, a torn line left out."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from channel_client.statefile import AppendOnlyFile


def test_appends_are_counted_and_a_rewrite_replaces_them(tmp_path: Path) -> None:
    file = AppendOnlyFile(tmp_path / "state" / "log.txt")
    assert not file.is_open and file.read() == []

    file.rewrite(["header"])
    file.append(["a", "b"])
    file.append(["c"], sync=True)
    assert (file.lines, file.appended) == (4, 3)
    assert file.read() == ["header", "a", "b", "c"]

    file.rewrite(["header", "c"])
    assert (file.lines, file.appended) == (2, 0)
    assert file.read() == ["header", "c"]
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.path.parent.stat().st_mode) == 0o700


def test_a_torn_last_line_is_left_out(tmp_path: Path) -> None:
    file = AppendOnlyFile(tmp_path / "log.txt")
    file.rewrite(["whole"])
    file.close()
    with file.path.open("a") as f:
        f.write("torn by a cra")
    assert file.read() == ["whole"]


def test_a_closed_file_takes_no_appends(tmp_path: Path) -> None:
    file = AppendOnlyFile(tmp_path / "log.txt")
    with pytest.raises(ValueError, match="closed"):
        file.append(["a"])
    file.rewrite([])
    file.close()
    assert not file.is_open
    with pytest.raises(ValueError, match="closed"):
        file.append(["a"])
