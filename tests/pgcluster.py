"""A throwaway PostgreSQL cluster for tests and benchmarks: ``initdb`` in a temp dir, one
``postgres`` process on 127.0.0.1 and a free port, password authentication, stopped by PID.

Debian's ``postgresql`` package provides the binaries (``scripts/test.sh`` installs it when
missing). PostgreSQL refuses to run as root, so under root the server runs as the
``postgres`` OS user the package creates, in a directory that user owns.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.procs import free_port, wait_until

SERVER_USER = "postgres"
"""The OS user the server runs as when the tests run as root."""
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
ROLE = "channels"


def pg_bin(name: str) -> str:
    """The path of a PostgreSQL server binary (Debian keeps them out of PATH)."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise RuntimeError(f"{name} not found: install Debian's postgresql (scripts/test.sh does)")
    return found


def _as_server_user(argv: list[str]) -> list[str]:
    return (
        [
            "setpriv",
            f"--reuid={SERVER_USER}",
            f"--regid={SERVER_USER}",
            "--init-groups",
            "--",
            *argv,
        ]
        if os.geteuid() == 0
        else argv
    )


@dataclass
class PgCluster:
    """One running server; ``dsn(db)`` names a database on it, ``create_database`` makes one."""

    root: Path
    port: int = 0
    password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> PgCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        data, sockets = self.root / "data", self.root / "sockets"
        sockets.mkdir(exist_ok=True)
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.root, SERVER_USER)
            shutil.chown(sockets, SERVER_USER)
            shutil.chown(pwfile, SERVER_USER)
        subprocess.run(
            _as_server_user(
                [
                    pg_bin("initdb"),
                    "-D",
                    str(data),
                    "-U",
                    ROLE,
                    "--pwfile",
                    str(pwfile),
                    "--auth=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
        )
        pwfile.unlink()
        self.port = free_port()
        return self.launch()

    def launch(self) -> PgCluster:
        """Run the server on the data dir and port it has (again after :meth:`stop`)."""
        data, sockets = self.root / "data", self.root / "sockets"
        self.process = subprocess.Popen(
            _as_server_user(
                [
                    pg_bin("postgres"),
                    "-D",
                    str(data),
                    "-p",
                    str(self.port),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"unix_socket_directories={sockets}",
                    "-c",
                    "max_connections=200",
                    "-c",
                    "fsync=on",
                ]
            ),
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "server.log", "ab"),  # noqa: SIM115 - the server owns it
        )
        wait_until(self._ready, START_TIMEOUT_S, f"postgres on port {self.port}")
        return self

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            log = (self.root / "server.log").read_text(errors="replace")
            raise RuntimeError(f"postgres exited: {log[-2000:]}")
        done = subprocess.run(
            [pg_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
            capture_output=True,
        )
        return done.returncode == 0

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{ROLE}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A fresh empty database; returns its DSN."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then SIGKILL at the deadline."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)


def start_cluster(root: Path | None = None) -> PgCluster:
    """Start a server under ``root`` (a new temp dir by default)."""
    return PgCluster(root or Path(tempfile.mkdtemp(prefix="pgcluster-"))).start()
