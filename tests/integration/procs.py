"""Real processes for integration tests: broker, subscribers, publishers on 127.0.0.1.

Every process is started with a free port, read line by line from a reader thread, and
always cleaned up (SIGTERM, then SIGKILL) by the fixture that owns it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from channel_server.credentials import STATE_DIR_ENV
from channel_server.private_files import write_private
from subscriber.record import read_records

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.02
PROJECT_ROOT = Path(__file__).resolve().parents[2]
CLOCK_SHIFT_DIR = Path(__file__).parent / "clock_shift"
"""On the ``PYTHONPATH`` of a process whose wall clock a test steps (:class:`ShiftedClock`)."""


FIXED_PORTS = (10000, 32768)
"""Where :func:`free_port` picks: below Linux's ephemeral range (``ip_local_port_range``
starts at 32768 by default), which is where every daemon binding port 0 gets its port."""


def free_port() -> int:
    """A port nothing listens on now, for a test to bind soon (a name server's). Picked
    outside the ephemeral range: a port 0 binds to could be given, in the window before
    the test binds it, to a daemon of another test running at the same time (a
    subscriber's callback once answered a broker looking for its name server there)."""
    low, high = FIXED_PORTS
    with contextlib.suppress(OSError, ValueError):
        high = min(high, int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]))
    for _ in range(100):
        port = _pick.randrange(low, high)
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            return port
    with socket.socket() as s:  # (the whole range taken: any free port, as before)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_pick = random.SystemRandom()


def logged(proc: Proc, pattern: str, times: int, timeout_s: float = 10.0) -> None:
    """``proc`` logged a line matching ``pattern`` exactly ``times`` times: its output is
    read by a thread, so a line the process wrote before answering may arrive after the
    answer; wait for the count, then check it is not more."""
    wait_until(lambda: proc.count(pattern) >= times, timeout_s, what=f"{times} x {pattern!r}")
    assert proc.count(pattern) == times, proc.output()


def wait_until(
    condition: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition"
) -> Any:
    """Poll ``condition`` until it returns something truthy, or fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        pause.wait(POLL_S)


class Proc:
    """A child process whose merged output is collected line by line."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.popen = subprocess.Popen(
            [sys.executable, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=PROJECT_ROOT,
            env=env,
        )
        self._asked = False
        self.lines: list[str] = []
        self.stamped: list[tuple[float, str]] = []
        """Each output line with the wall-clock time (``time.time()``) it arrived."""
        self._new: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.popen.stdout:
            self.stamped.append((time.time(), line.rstrip("\n")))
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)

    def wait_for(self, pattern: str, timeout_s: float = READY_TIMEOUT_S) -> re.Match[str]:
        """The first output line (seen so far or coming) that matches ``pattern``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if match := regex.search(line):
                    return match
            seen = len(self.lines)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self.popen.poll() is not None and self._new.empty()):
                raise AssertionError(
                    f"{self.name}: no line matching {pattern!r}; output:\n" + self.output()
                )
            with contextlib.suppress(queue.Empty):
                self._new.get(timeout=min(remaining, 0.5))

    def output(self) -> str:
        return "\n".join(self.lines)

    def count(self, pattern: str) -> int:
        regex = re.compile(pattern)
        return sum(1 for line in self.lines if regex.search(line))

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def serves(self) -> bool:
        """A broker or a name server (others are its clients)."""
        return self.popen.args[2:4] in (
            ["channel_server", "serve"],
            ["channel_server", "nameserver"],
        )

    def ask_to_stop(self) -> None:
        """SIGCONT (a stopped process, a fault test's SIGSTOP, cannot act on SIGTERM), then
        SIGTERM; once."""
        if self.alive and not self._asked:
            self._asked = True
            self.popen.send_signal(signal.SIGCONT)
            self.popen.send_signal(signal.SIGTERM)

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; SIGKILL if it does not stop in time. Returns the exit code."""
        if self.alive:
            self.ask_to_stop()
            try:
                return self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        return self.kill()

    def kill(self) -> int:
        if self.alive:
            self.popen.kill()
        code = self.popen.wait(STOP_TIMEOUT_S)
        self._reader.join(STOP_TIMEOUT_S)
        return code


class Cluster:
    """A name server port and the processes of one test; stops them all at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ns_port = free_port()
        self.procs: list[Proc] = []
        self._state_env = os.environ.get(STATE_DIR_ENV)
        os.environ[STATE_DIR_ENV] = str(tmp / "state")  # this process finds the token too

    @property
    def ns(self) -> list[str]:
        return ["--ns-host", "127.0.0.1", "--ns-port", str(self.ns_port)]

    @property
    def env(self) -> dict[str, str]:
        """Children keep their state files (publisher sequences, the broker's token) in
        this test's tmp dir, as this process does while the cluster lives."""
        return dict(os.environ, PYTHONUNBUFFERED="1", PUBSUB_STATE_DIR=str(self.tmp / "state"))

    def start(
        self, name: str, argv: list[str], ready: str | None, env: dict[str, str] | None = None
    ) -> Proc:
        """``env`` overrides some of the cluster's environment for this process."""
        proc = Proc(name, argv, self.env | (env or {}))
        self.procs.append(proc)
        if ready:
            try:
                proc.wait_for(ready)
            except AssertionError:
                proc.kill()  # one that hangs before ready must not outlive the attempt
                raise
        return proc

    def broker(
        self,
        *channels: str,
        extra: tuple[str, ...] = (),
        name: str = "broker",
        env: dict[str, str] | None = None,
    ) -> Proc:
        """A broker process; its store lives in this test's tmp dir unless ``--memory`` or
        ``--store``."""
        argv = ["-m", "channel_server", "serve", *self.ns, *extra]
        if not {"--memory", "--data-dir", "--store"} & set(extra):
            argv += ["--data-dir", str(self.data_dir(name))]
        for channel in channels:
            argv += ["--channel", channel]
        return self.start(name, argv, r"broker \S+ ready at", env)

    def subscriber(self, channel: str, sub_id: str, *extra: str, ready: bool = True) -> Proc:
        """A push subscriber process; ``ready``: wait until it says so (one that may die
        at once, of its first event, is not waited for)."""
        argv = ["-m", "subscriber", "run", *self.ns, "--channel", channel, "--id", sub_id]
        argv += ["--record", str(self.record_path(channel, sub_id)), *extra]
        return self.start(sub_id, argv, rf"subscriber {re.escape(sub_id)} ready" if ready else None)

    def run(
        self, argv: list[str], timeout_s: float = 60.0, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run a short-lived command (publisher, list) to completion; ``env`` overrides
        some of the cluster's environment."""
        return subprocess.run(
            [sys.executable, *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=PROJECT_ROOT,
            env=self.env | (env or {}),
        )

    def data_dir(self, broker_name: str) -> Path:
        return self.tmp / f"data-{broker_name}"

    def record_path(self, channel: str, sub_id: str) -> Path:
        return self.tmp / f"{channel}-{sub_id}.jsonl"

    def records(self, channel: str, *sub_ids: str) -> dict[str, list[dict[str, Any]]]:
        return {s: read_records(self.record_path(channel, s)) for s in sub_ids}

    def wait_for_records(
        self, channel: str, sub_ids: tuple[str, ...], total: int, timeout_s: float = 15.0
    ) -> dict[str, list[dict[str, Any]]]:
        def enough() -> dict[str, list[dict[str, Any]]] | None:
            got = self.records(channel, *sub_ids)
            return got if sum(len(r) for r in got.values()) >= total else None

        return wait_until(enough, timeout_s, f"{total} processed events on {channel}")

    def close(self) -> None:
        """Clients first, all at once (a subscriber says goodbye to its broker, which must
        still be there to answer), then the brokers and name servers."""
        for serving in (False, True):
            stopping = [p for p in reversed(self.procs) if p.serves is serving]
            for proc in stopping:
                proc.ask_to_stop()
            for proc in stopping:
                proc.terminate()
        if self._state_env is None:
            os.environ.pop(STATE_DIR_ENV, None)
        else:
            os.environ[STATE_DIR_ENV] = self._state_env


class ShiftedClock:
    """The wall clock of the processes started with :attr:`env`: off by what :meth:`step`
    last set (seconds; negative: behind), from the step on."""

    def __init__(self, tmp: Path) -> None:
        self.file = tmp / "clock-shift"
        self.step(0.0)

    def step(self, seconds: float) -> None:
        write_private(self.file, repr(seconds))  # replaced whole: no reader sees half of it

    @property
    def env(self) -> dict[str, str]:
        paths = os.pathsep.join(filter(None, [str(CLOCK_SHIFT_DIR), os.environ.get("PYTHONPATH")]))
        return {"PYTHONPATH": paths, "CLOCK_SHIFT_FILE": str(self.file)}
