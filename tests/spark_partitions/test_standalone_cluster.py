"""The plan on a real Spark standalone cluster (issue 18): a master and two workers started
from the installed pyspark distribution on 127.0.0.1 (its own launcher classes, nothing
downloaded), the CLI submitting to ``spark://``, and the plan identical to the local Spark
session's and the reference engine's. Executors read the input and write the blocks on
this machine's disk, as they would on a cluster with a shared file system."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_partitions.config import PlanConfig
from spark_partitions.formats import Format
from tests.integration.procs import PROJECT_ROOT, Cluster, free_port, wait_until
from tests.integration.test_batch_file import check_delivery, publish_file, write_batch

pytestmark = [pytest.mark.spark, pytest.mark.slow]

START_TIMEOUT_S = 90.0
"""JVM start-up of a master or a worker on a busy 2-core machine."""
STOP_TIMEOUT_S = 15.0
JOB_TIMEOUT_S = 300.0
WORKERS = 2
WORKER_MEMORY = "1g"
SUBSCRIBERS = 3
SPARK_HOME = Path(__import__("pyspark").__file__).parent
PROPERTIES = "spark.master.rest.enabled false\nspark.worker.cleanup.enabled false\n"
"""No REST submission server (it would take the fixed port 6066)."""


class StandaloneCluster:
    """A master and its workers as child processes, each in its own process group, so
    that stopping one stops its JVM and nothing else."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self._procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        self._properties = root / "spark.properties"
        self._properties.write_text(PROPERTIES)

    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            SPARK_HOME=str(SPARK_HOME),
            PYSPARK_PYTHON=sys.executable,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.root / "logs"),
        )

    def start(self) -> None:
        master = self._launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(self.port), "--webui-port", "0"],
        )
        self._wait_for(master, "I have been elected leader")
        for n in range(WORKERS):
            work_dir = self.root / f"work-{n}"
            work_dir.mkdir()
            worker = self._launch(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                [self.url, "--host", "127.0.0.1", "--cores", "1", "--memory", WORKER_MEMORY,
                 "--webui-port", "0", "--work-dir", str(work_dir)],
            )  # fmt: skip
            self._wait_for(worker, "Successfully registered with master")

    def _launch(self, name: str, main_class: str, args: list[str]) -> Path:
        log = self.root / f"{name}.log"
        command = [str(SPARK_HOME / "bin" / "spark-class"), main_class, *args]
        command += ["--properties-file", str(self._properties)]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=self.env(), cwd=self.root,
                start_new_session=True,
            )  # fmt: skip
        self._procs.append((proc, log))
        return log

    def _wait_for(self, log: Path, line: str) -> None:
        proc = self._procs[-1][0]
        ended = f"{log.name} to say {line!r} (or its process to end)"
        wait_until(lambda: line in log.read_text(errors="replace") or proc.poll() is not None,
                   START_TIMEOUT_S, ended)  # fmt: skip
        if line not in log.read_text(errors="replace"):
            tail = log.read_text(errors="replace")[-2000:]
            raise AssertionError(f"{log.name}: no {line!r} (exit {proc.poll()}):\n{tail}")

    def applications(self) -> set[str]:
        """The applications whose executors ran on the workers (their work dirs)."""
        return {app.name for app in self.root.glob("work-*/app-*")}

    def stop(self) -> None:
        for proc, _ in reversed(self._procs):
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT_S)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A batch with duplicates and invalid rows, so rejects and dedupe cross executors."""
    path = tmp_path_factory.mktemp("batch") / "in.jsonl"
    generate = [sys.executable, "-m", "spark_partitions", "generate", str(path)]
    options = ["--count", "3000", "--duplicates", "0.02", "--invalid", "0.02", "--seed", "18"]
    subprocess.run([*generate, *options], check=True, cwd=PROJECT_ROOT, timeout=60)
    return path


def test_the_plan_on_a_standalone_cluster_is_the_local_and_reference_plan(
    standalone: StandaloneCluster, batch: Path, spark, kit, tmp_path: Path
) -> None:
    out = tmp_path / "cluster"
    plan = [sys.executable, "-m", "spark_partitions", "plan", str(batch), "--out", str(out)]
    options = ["--subscribers", str(SUBSCRIBERS), "--engine", "spark", "--master", standalone.url]
    result = subprocess.run(
        [*plan, *options], capture_output=True, text=True, cwd=PROJECT_ROOT,
        env=standalone.env(), timeout=JOB_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    local = kit.engines_agree(spark, tmp_path, batch, Format.JSONL, PlanConfig(SUBSCRIBERS))
    assert local.plan.rejected > 0 and local.plan.duplicates_dropped > 0
    assert (out / "plan.json").read_text() == (tmp_path / "ref" / "plan.json").read_text()
    assert kit.block_listing(out) == kit.block_listing(tmp_path / "ref")
    assert standalone.applications(), "the plan did not run on the workers"


def test_publish_a_file_planned_on_a_standalone_cluster(
    standalone: StandaloneCluster, tmp_path: Path
) -> None:
    apps_before = standalone.applications()
    cluster = Cluster(tmp_path)
    try:
        cluster.broker("batch")
        cluster.subscriber("batch", "s1")
        cluster.subscriber("batch", "s2")
        valid, order = write_batch(cluster.tmp / "batch.jsonl")
        path = cluster.tmp / "batch.jsonl"
        extra = ("--master", standalone.url)
        result = publish_file(cluster, path, "always", JOB_TIMEOUT_S, *extra)
        assert result.returncode == 7, result.stderr[-3000:]  # one invalid row, named
        assert "plan: spark: 41 events in 6 blocks over 2 slots" in result.stdout
        figures = json.loads(result.stdout.splitlines()[-1])
        assert (figures["accepted"], figures["duplicates"]) == (41, 0)
        check_delivery(cluster, valid, order)
    finally:
        cluster.close()
    assert standalone.applications() > apps_before, "the plan did not run on the workers"
