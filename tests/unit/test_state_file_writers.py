"""Writers of one state file never lose each other's changes: a publisher id used on two
channels at once, from two threads or two processes, keeps both channels' sequences (a lost
one would make the next run reuse ids, all reported as duplicates)."""

from __future__ import annotations

import stat
import subprocess
import sys
import threading
from pathlib import Path

from publisher.state import PublisherState
from tests.integration.procs import PROJECT_ROOT

RESERVES = 200
WRITER = """
import sys
from pathlib import Path
from publisher.state import PublisherState
state = PublisherState(Path(sys.argv[1]), "PUB")
for n in range(1, int(sys.argv[3]) + 1):
    state.reserve(sys.argv[2], n)
"""


def reserve_all(state_dir: Path, channel: str) -> None:
    state = PublisherState(state_dir, "PUB")
    for n in range(1, RESERVES + 1):
        state.reserve(channel, n)


def test_two_threads_on_two_channels_keep_both_sequences(tmp_path: Path) -> None:
    threads = [
        threading.Thread(target=reserve_all, args=(tmp_path, channel)) for channel in ("x", "y")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    state = PublisherState(tmp_path, "PUB")
    assert (state.next_seq("x"), state.next_seq("y")) == (RESERVES, RESERVES)
    assert not list(tmp_path.glob("*.tmp")), "a temp file was left behind"
    assert stat.S_IMODE(state.file.path.stat().st_mode) == 0o600


def test_two_processes_on_two_channels_keep_both_sequences(tmp_path: Path) -> None:
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), channel, str(RESERVES)],
            cwd=PROJECT_ROOT,
        )
        for channel in ("x", "y")
    ]
    assert [w.wait(60) for w in writers] == [0, 0]
    state = PublisherState(tmp_path, "PUB")
    assert (state.next_seq("x"), state.next_seq("y")) == (RESERVES, RESERVES)
