"""The documentation's examples run as written against a fresh broker: README's library
example (twice: a re-run publishes new events), examples/jobs.py (1,000 jobs spread
evenly over 4 workers, each done once) and examples/stream.py (threads sharing a
Publisher submit events one at a time, each stored and processed). Only the name
server's port is changed: the examples say 9090, the test's broker listens on a free
port."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.conftest import channel_stats
from tests.integration.procs import PROJECT_ROOT, Cluster

pytestmark = pytest.mark.integration
README = PROJECT_ROOT / "README.md"
LIBRARY_SECTION = "### As a library\n"
DOCUMENTED_PORT = "ns_port=9090"
JOBS = 1000
WORKERS = 4


def library_blocks() -> list[str]:
    """The python code blocks of README's library section (up to the next heading)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(LIBRARY_SECTION) + len(LIBRARY_SECTION)
    end = re.compile(r"^#{2,3} ", re.M).search(text, start)
    return re.findall(r"^```python\n(.*?)^```", text[start : end.start()], re.M | re.S)


def on_port(code: str, port: int) -> str:
    assert DOCUMENTED_PORT in code
    return code.replace(DOCUMENTED_PORT, f"ns_port={port}")


def run_here(cluster: Cluster, argv: list[str]):
    """Run a script with this checkout's packages importable, as from the repo root."""
    return cluster.run(argv, timeout_s=120, env={"PYTHONPATH": str(PROJECT_ROOT)})


def test_readme_library_example_runs_on_a_fresh_broker_and_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.broker()  # no channels: the example must create its own
    (block,) = library_blocks()
    claimed_summary = re.search(r"print\(summary\)\s+# (.+)", block).group(1)
    script = tmp_path / "readme_library.py"
    script.write_text(on_port(block, cluster.ns_port), encoding="utf-8")
    handled: list[list[str]] = []
    for _ in range(2):
        result = run_here(cluster, [str(script)])
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert claimed_summary in lines  # what README says it prints
        handled.append(sorted(line.split()[0] for line in lines if line.startswith("PUB-")))
        assert "published to orders before" not in result.stderr  # no run of duplicates
    assert handled == [["PUB-1", "PUB-2", "PUB-3"], ["PUB-4", "PUB-5", "PUB-6"]]
    stats = channel_stats(cluster, "orders")
    assert (stats["accepted"], stats["acked"], stats["unacked"]) == (6, 6, 0)


def test_the_jobs_example_spreads_the_work_evenly_and_waits_for_it(cluster: Cluster) -> None:
    cluster.broker()
    argv = [str(PROJECT_ROOT / "examples" / "jobs.py"), "--ns-port", str(cluster.ns_port)]
    result = run_here(cluster, [*argv, "--jobs", str(JOBS), "--workers", str(WORKERS)])
    assert result.returncode == 0, result.stdout + result.stderr
    per_worker = {
        m["worker"]: int(m["jobs"])
        for m in re.finditer(r"^(?P<worker>worker-\d+): (?P<jobs>\d+) jobs$", result.stdout, re.M)
    }
    assert sorted(per_worker) == [f"worker-{n}" for n in range(WORKERS)], result.stdout
    assert sum(per_worker.values()) == JOBS
    fair = JOBS / WORKERS
    assert min(per_worker.values()) >= fair / 3, per_worker  # not one worker doing it all
    assert f"{JOBS} jobs published, {JOBS} done in " in result.stdout
    assert "0 missing, 0 done more than once" in result.stdout
    stats = channel_stats(cluster, "jobs")  # the broker agrees: all acknowledged, none left
    assert (stats["accepted"], stats["acked"], stats["unacked"]) == (JOBS, JOBS, 0)


def test_the_stream_example_stores_and_processes_every_submitted_event(cluster: Cluster) -> None:
    cluster.broker()
    argv = [str(PROJECT_ROOT / "examples" / "stream.py"), "--ns-port", str(cluster.ns_port)]
    result = run_here(cluster, [*argv, "--handlers", "4", "--events", "4000"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4000 events submitted by 4 handlers, stored in " in result.stdout
    for handler in range(4):
        assert f"handler-{handler}: 1000 events processed" in result.stdout
    stats = channel_stats(cluster, "clicks")
    assert (stats["accepted"], stats["acked"], stats["unacked"]) == (4000, 4000, 0)
