"""A broker process raises its garbage collector's thresholds (cli.GC_THRESHOLDS): what it
keeps per partition would otherwise make full collections frequent. Checked in a child
process, so this one's collector is left as it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from channel_server import cli

SERVE_THEN_REPORT = """
import gc, json, sys
from channel_server import cli
before = gc.get_threshold()
code = cli.main(["serve", "--data-dir", sys.argv[1]])  # not a directory: exits at once
print(json.dumps([before, gc.get_threshold(), code]))
"""


def test_serve_raises_the_collector_thresholds(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a data directory")
    out = subprocess.run(
        [sys.executable, "-c", SERVE_THEN_REPORT, str(blocker / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    before, after, code = json.loads(out.splitlines()[-1])
    assert before == [700, 10, 10]  # CPython's
    assert after == list(cli.GC_THRESHOLDS)
    assert code == 3  # the store could not be opened: unavailable
