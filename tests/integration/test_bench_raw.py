"""``scripts/bench.py --only raw``: the transport's ceiling is measured against a bare Pyro5
daemon, which knows no secret. A process holding the local token (any machine where a
broker ran) must still reach it rather than ask it for a proof it cannot give."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from channel_server.credentials import OWNER, PASSWORD_ENV, USER_ENV
from tests.integration.procs import PROJECT_ROOT

pytestmark = pytest.mark.integration


def test_the_raw_ceiling_is_measured_by_a_process_holding_the_local_token() -> None:
    env = dict(os.environ, **{USER_ENV: OWNER, PASSWORD_ENV: "the-local-token"})
    argv = ["scripts/bench.py", "--only", "raw", "--runs", "1", "--raw-events", "300", "--json"]
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    raw = json.loads(done.stdout)["results"]["raw"]
    assert "error" not in raw
    assert [run["events"] for run in raw["runs"]] == [300]
