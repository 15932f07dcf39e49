"""Fixtures of every test: clients keep their state (publisher sequences, tokens) under
pytest's tmp dir, never in the user's own state dir; ``cluster`` is a test's real processes
(name server, brokers, subscribers), all stopped at its end."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from channel_client.statefile import STATE_DIR_ENV
from tests.integration.procs import Cluster
from tests.integration.tls_certs import certs  # noqa: F401 (a fixture for every test)
from tests.pgcluster import PgCluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules marked ``slow`` first (a stable sort): run in parallel (scripts/test.sh,
    ``--dist loadfile``), the long ones start at once instead of ending the run alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True, scope="session")
def _private_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STATE_DIR_ENV, str(tmp_path_factory.mktemp("state")))
        yield


FAILED_OUTPUT_LINES = 60
"""How much of each process's output a failed cluster test shows (its last lines)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """A failed test's processes show the end of their output beside the failure, so a
    CI log says what the brokers and subscribers did."""
    report = yield
    cluster = getattr(item, "funcargs", {}).get("cluster")
    if report.when == "call" and report.failed and isinstance(cluster, Cluster):
        for proc in cluster.procs:
            tail = proc.output().splitlines()[-FAILED_OUTPUT_LINES:]
            report.sections.append((f"output of {proc.name}", "\n".join(tail)))
    return report


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One throwaway PostgreSQL server for the session (tests/pgcluster.py)."""
    root = Path(tempfile.mkdtemp(prefix="pgcluster-"))
    cluster = PgCluster(root)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_dsn(pg_cluster: PgCluster) -> str:
    """A fresh empty database on the session's server, one per test."""
    return pg_cluster.create_database(f"t_{secrets.token_hex(6)}")
