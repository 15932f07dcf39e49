"""Child processes of the bench scripts: start, watch for a ready line, stop, clean up.

Every child runs in its own session (a terminal Ctrl-C reaches only the driver, which then
stops them: SIGTERM, wait, SIGKILL), gets SIGTERM when the driver dies even by SIGKILL
(``PR_SET_PDEATHSIG``), and writes stdout+stderr to a log file in the run's directory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent.parent
"""The checkout the bench scripts live in; children put it first on ``sys.path``."""
HOST = "127.0.0.1"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class BenchError(RuntimeError):
    """A measurement could not be made (a process did not start, a wait timed out)."""


def child_env() -> dict[str, str]:
    """The environment of a child: unbuffered, this checkout first on ``sys.path``."""
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=pythonpath)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Proc:
    """A child process in its own session; its stdout+stderr go to a log file, read by a
    thread that also watches for the ready line."""

    def __init__(self, name: str, argv: list[str], log_path: Path, ready: str | None) -> None:
        self.name = name
        self.log_path = log_path
        self._ready_re = re.compile(ready) if ready else None
        self._ready = threading.Event()
        self.ready_match: re.Match[str] | None = None
        self.ready_at: float | None = None
        """time.monotonic() when the ready line was read."""
        self._log: TextIO = log_path.open("w", encoding="utf-8")
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a terminal Ctrl-C reaches only us; we stop them
            preexec_fn=_die_with_parent,
        )
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._log.write(line)
            self._log.flush()
            if self._ready_re and not self._ready.is_set():
                match = self._ready_re.search(line)
                if match:
                    self.ready_at = time.monotonic()
                    self.ready_match = match
                    self._ready.set()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self.popen.poll() is not None:
                self._reader.join(1.0)
                raise BenchError(
                    f"{self.name} exited with {self.popen.returncode} before it was ready:\n"
                    + self.tail()
                )
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name} not ready after {timeout_s:g} s:\n" + self.tail())
        assert self.ready_match is not None
        return self.ready_match

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join("    " + ln for ln in text.splitlines()[-lines:])

    def close_log(self) -> None:
        self._reader.join(2.0)
        with contextlib.suppress(OSError):
            self._log.close()


class ProcGroup:
    """Owns child processes; ``stop`` sends SIGTERM to all, waits, then SIGKILLs."""

    _live: list[ProcGroup] = []

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []
        self.scratch: list[Path] = []
        """Directories deleted once the processes are stopped (the broker's store)."""
        ProcGroup._live.append(self)

    def __enter__(self) -> ProcGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, name: str, argv: list[str], ready: str | None = None) -> Proc:
        proc = Proc(name, argv, self.workdir / f"{name}.log", ready)
        self.procs.append(proc)
        return proc

    def stop(self, procs: list[Proc], timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Graceful stop of some processes, at once; SIGKILL after the timeout."""
        for proc in procs:
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{proc.name} did not stop within {timeout_s:g} s: SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.kill()
                proc.popen.wait(5.0)
            proc.close_log()

    def close(self) -> None:
        """Stop everything still running, newest first (subscribers before the broker)."""
        with _signals_ignored():
            alive = [p for p in reversed(self.procs) if p.popen.poll() is None]
            subs = [p for p in alive if not p.name.startswith("broker")]
            self.stop(subs)
            self.stop([p for p in alive if p not in subs])
            for proc in self.procs:
                proc.close_log()
            for path in self.scratch:
                shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(ValueError):
                ProcGroup._live.remove(self)

    @classmethod
    def close_all(cls) -> None:
        """Close every group still open (the driver's ``finally``)."""
        for group in list(cls._live):
            group.close()

    @classmethod
    def kill_all(cls) -> None:
        """Last resort at interpreter exit."""
        for group in list(cls._live):
            for proc in group.procs:
                if proc.popen.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.popen.kill()


atexit.register(ProcGroup.kill_all)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """Let cleanup finish even when Ctrl-C is pressed again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if this driver dies, even by SIGKILL (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def raise_interrupt(signum: int, frame: Any) -> None:
    """Signal handler: SIGTERM / SIGINT become KeyboardInterrupt in the driver."""
    raise KeyboardInterrupt(f"signal {signum}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def read_rss_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB, and its Threads (from /proc/<pid>/status)."""
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                values[key] = int(rest.split()[0])
    return values


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time of a process (all its threads); ``None`` is this process."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> float:
    return round(os.getloadavg()[0], 2)
