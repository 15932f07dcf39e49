"""The actors of the fault benchmarks: a publisher streaming at a pace from a thread of
its own, and a subscriber that crash-loops (restarted with the same id whenever it exits)."""

from __future__ import annotations

import json
import threading
from typing import Any, Protocol

from bench_support.procs import BenchError, Proc, ProcGroup, log
from bench_support.service import CHANNEL, EventMaker, publish_count

POLL_S = 0.01
CRASH_EXIT_CODE = 137
"""What ``--fault crash-after:K`` exits with (like a SIGKILL)."""
MAX_ODD_EXITS = 5
"""Exits in a row that were not the injected crash before the looper gives up."""


class LooperSettings(Protocol):
    python: str
    crash_after: int
    degraded_prefetch: int | None


class Streamer:
    """Publishes ``per_tick`` events every ``tick_s`` from a thread of its own (which owns
    the publisher's proxy) until stopped."""

    def __init__(self, ns_port: int, maker: EventMaker, per_tick: int, tick_s: float) -> None:
        self._ns_port = ns_port
        self._maker = maker
        self._per_tick = per_tick
        self._tick_s = tick_s
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.published = 0
        self._thread = threading.Thread(target=self._run, name="streamer", daemon=True)

    def __enter__(self) -> Streamer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30.0)

    def _run(self) -> None:
        from publisher.client import Publisher

        try:
            with Publisher(
                CHANNEL, self._maker.publisher_id, ns_port=self._ns_port, state_dir=None
            ) as pub:
                self.published = publish_count(
                    pub, self._maker, 10**12, self._per_tick, self._tick_s, self._stop
                )
        except BaseException as exc:
            self._error = exc

    def stop(self) -> int:
        """Stop publishing; returns how many events were published."""
        self._stop.set()
        self._thread.join(30.0)
        if self._thread.is_alive():
            raise BenchError("the streaming publisher did not stop")
        if self._error is not None:
            raise BenchError(f"streaming publisher failed: {self._error!r}")
        return self.published

    def check(self) -> None:
        if self._error is not None:
            raise BenchError(f"streaming publisher failed: {self._error!r}")


class CrashLooper:
    """Keeps one ``python -m subscriber run --fault crash-after:K`` subscriber running:
    whenever it exits, a new process with the same id is started, until ``stop``. Every
    incarnation appends the events it processed to one ``--record`` file."""

    def __init__(self, procs: ProcGroup, fs: LooperSettings, ns_port: int, sub_id: str) -> None:
        self._procs = procs
        self.sub_id = sub_id
        self.record = procs.workdir / f"{sub_id}.jsonl"
        self._argv = [
            fs.python, "-m", "subscriber", "run",
            "--ns-port", str(ns_port),
            "--channel", CHANNEL,
            "--id", sub_id,
            "--fault", f"crash-after:{fs.crash_after}",
            "--record", str(self.record),
            "--quiet",
        ]  # fmt: skip
        if fs.degraded_prefetch is not None:
            self._argv += ["--prefetch", str(fs.degraded_prefetch)]
        self.crashes = 0
        self.other_exits: list[int] = []
        self._current: Proc | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="crash-looper", daemon=True)
        self.error: str | None = None

    def _spawn(self) -> Proc:
        name = f"{self.sub_id}-{self.crashes + len(self.other_exits) + 1}"
        return self._procs.start(name, self._argv, rf"subscriber {self.sub_id} ready")

    def start(self) -> None:
        self._current = self._spawn()
        self._current.wait_ready()
        self._thread.start()

    def _watch(self) -> None:
        odd_in_a_row = 0
        while not self._stop.wait(POLL_S):
            assert self._current is not None
            code = self._current.popen.poll()
            if code is None:
                continue
            if code == CRASH_EXIT_CODE:
                self.crashes += 1
                odd_in_a_row = 0
            else:
                self.other_exits.append(code)
                odd_in_a_row += 1
                log(f"{self._current.name} exited with {code}:\n{self._current.tail(5)}")
                if odd_in_a_row >= MAX_ODD_EXITS:
                    self.error = f"{self.sub_id} exited {odd_in_a_row} times without crashing"
                    return
            if not self._stop.is_set():
                self._current = self._spawn()

    def stop(self) -> None:
        """Stop restarting, then stop the incarnation running now (gracefully)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10.0)
        if self._current is not None:
            self._procs.stop([self._current])

    def processed(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        with self.record.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
