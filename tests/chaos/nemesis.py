"""The nemesis: a seeded fault schedule and the executor that applies it to real processes.

``schedule`` is a pure function of the seed, so a failing run replays from its seed. The
executor runs one thread per target (the broker, each subscriber), so faults on different
processes may overlap in time while faults on one process never do, and writes the fault
log the checker reads: kind, target, the pid hit, wall-clock start and end.
"""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from subscriber.faults import CRASH_EXIT_CODE
from tests.integration.procs import Proc

KINDS = ("sub-kill", "sub-stop", "sub-term", "broker-kill", "drop-acks", "crash-after")
BROKER = "broker"
CLOCK = "broker-clock"
"""The kind and target of a step of the broker's wall clock (:func:`clock_steps`)."""
BROKER_STOP_S = (1.0, 6.0)
CLOCK_STEPS_MAX = 2
CLOCK_STEP_S = (30.0, 250.0)
"""How far a step sets the broker's clock off the true time, back or forward: within the
300 s a proof of the token or of a callback secret may be off (proofs.PROOF_WINDOW_S), as
between two machines whose clocks are set."""
TAKEOVER = "sub-takeover"
"""A subscriber frozen while a new process with its id takes the id over, then thawed (a
zombie) and stopped: :func:`takeovers`."""
TAKEOVER_S = (2.0, 5.0)
"""How long the old process stays frozen (the new one subscribes meanwhile: the broker
pings the old one for 1 s first)."""
ZOMBIE_RUN_S = 3.0
"""How long the thawed old process runs before it is stopped (SIGTERM)."""
DROP_ACKS = "drop-acks:0.2"
RESTART_MARGIN_S = 3.0
"""Reserved after each fault for the restart, so faults on one target do not overlap."""
CRASH_WAIT_S = 8.0
"""A crash-after that has not fired by then (its subscriber got too few events) is ended
by a normal restart and logged as not fired."""
FAULTS_MIN, FAULTS_MAX = 3, 6
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str
    at: float
    """Seconds after the stream started."""
    duration: float
    """Pause before the restart (kills), stop length, drop-acks phase, crash-after wait cap."""
    count: int = 0
    """crash-after: exit when this event arrives."""
    shift: float = 0.0
    """broker-clock: seconds the broker's wall clock reads off from then on."""

    @property
    def busy(self) -> tuple[float, float]:
        return self.at, self.at + self.duration + RESTART_MARGIN_S

    def __str__(self) -> str:
        if self.kind == CLOCK:
            return f"+{self.at:.2f}s {self.kind} ({self.shift:+.1f}s off)"
        extra = f" N={self.count}" if self.kind == "crash-after" else ""
        return f"+{self.at:.2f}s {self.kind} {self.target} ({self.duration:.2f}s{extra})"


def _draw(rng: random.Random, kind: str) -> tuple[float, int]:
    """(duration, count) of one fault of ``kind``."""
    if kind in ("sub-kill", "broker-kill"):
        return rng.uniform(0.5, 2.0), 0
    if kind == "sub-stop":
        return rng.uniform(1.0, 8.0), 0
    if kind == "drop-acks":
        return rng.uniform(2.0, 5.0), 0
    if kind == "crash-after":
        return CRASH_WAIT_S, rng.randint(5, 30)
    return 0.0, 0  # sub-term: stop and start again at once


def schedule(
    seed: int, stream_s: float, subscribers: Sequence[str] = ("s1", "s2", "s3")
) -> list[Fault]:
    """3-6 faults at random times within the stream; one target's faults never overlap."""
    rng = random.Random(seed)
    wanted = rng.randint(FAULTS_MIN, FAULTS_MAX)
    faults: list[Fault] = []
    for _ in range(100 * FAULTS_MAX):  # a bounded number of draws; rejections are rare
        if len(faults) == wanted:
            break
        kind = rng.choice(KINDS)
        target = BROKER if kind == "broker-kill" else rng.choice(list(subscribers))
        at = rng.uniform(0.05, 0.7) * stream_s
        duration, count = _draw(rng, kind)
        fault = Fault(kind, target, round(at, 3), round(duration, 3), count)
        if not any(f.target == target and _overlap(f.busy, fault.busy) for f in faults):
            faults.append(fault)
    return sorted(faults, key=lambda f: (f.at, f.target))


def clock_steps(seed: int, stream_s: float) -> list[Fault]:
    """0-2 steps of the broker's wall clock at random times within the stream, drawn apart
    from :func:`schedule` (a seed keeps the process faults it drew before these existed).
    A step holds until the next, across the broker's restarts: a broker killed then
    starts with its clock off."""
    rng = random.Random(f"clock steps {seed}")
    steps = []
    for _ in range(rng.randint(0, CLOCK_STEPS_MAX)):
        at = rng.uniform(0.05, 0.7) * stream_s
        shift = rng.choice((-1, 1)) * rng.uniform(*CLOCK_STEP_S)
        steps.append(Fault(CLOCK, CLOCK, round(at, 3), 0.0, shift=round(shift, 1)))
    return sorted(steps, key=lambda f: f.at)


def broker_stops(seed: int, stream_s: float, faults: Sequence[Fault]) -> list[Fault]:
    """A SIGSTOP of the broker for 1-6 s (a process pause: a long GC, a VM migrated, a
    laptop lid), drawn apart from :func:`schedule` as clock steps are; none where it would
    overlap one of the broker's ``faults``."""
    rng = random.Random(f"broker stops {seed}")
    at = round(rng.uniform(0.05, 0.7) * stream_s, 3)
    stop = Fault("broker-stop", BROKER, at, round(rng.uniform(*BROKER_STOP_S), 3))
    if any(f.target == BROKER and _overlap(f.busy, stop.busy) for f in faults):
        return []
    return [stop]


def takeovers(
    seed: int, stream_s: float, faults: Sequence[Fault], subscribers: Sequence[str]
) -> list[Fault]:
    """A subscriber's id taken over by a new process while the old one is frozen (an
    operator starting it again elsewhere, a supervisor that gave up on it), drawn apart
    from :func:`schedule` as clock steps are; in a run where some subscriber has no other
    fault then (nor during the zombie's run after the thaw)."""
    rng = random.Random(f"takeovers {seed}")
    at = round(rng.uniform(0.05, 0.5) * stream_s, 3)
    duration = round(rng.uniform(*TAKEOVER_S), 3)
    for target in rng.sample(list(subscribers), len(subscribers)):  # the first one free
        fault = Fault(TAKEOVER, target, at, duration)
        busy = (fault.busy[0], fault.busy[1] + ZOMBIE_RUN_S)
        if not any(f.target == target and _overlap(f.busy, busy) for f in faults):
            return [fault]
    return []


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


class World(Protocol):
    """The running processes, as the harness owns them."""

    def proc(self, target: str) -> Proc:
        """The current process of a target."""
        ...

    def restart(self, target: str, *extra: str) -> Proc:
        """Start the target's command again (with ``extra`` flags) and wait until ready."""
        ...

    def step_clock(self, seconds: float) -> None:
        """Set the broker's wall clock ``seconds`` off the true time from now on."""
        ...


class Nemesis:
    """Applies a schedule; ``log`` is the fault log, ``errors`` what could not be done."""

    def __init__(
        self,
        world: World,
        faults: Sequence[Fault],
        seed: int,
        say: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.world = world
        self.faults = list(faults)
        self.seed = seed
        self.say = say
        self.stop = threading.Event()
        """Set to end early: pending pauses return at once and no further fault starts."""
        self.log: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._threads: list[threading.Thread] = []
        self._t0 = 0.0

    def start(self) -> None:
        """Start the clock (t = 0 is the stream's start) and one thread per target."""
        self._t0 = time.monotonic()
        targets = sorted({f.target for f in self.faults})
        for target in targets:
            mine = [f for f in self.faults if f.target == target]
            thread = threading.Thread(target=self._run, args=(mine,), name=f"nemesis-{target}")
            thread.start()
            self._threads.append(thread)

    def join(self, timeout_s: float) -> bool:
        """Wait for every fault to end (restarts included); False at the deadline."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def _run(self, faults: list[Fault]) -> None:
        for n, fault in enumerate(faults):
            if self.stop.wait(max(0.0, self._t0 + fault.at - time.monotonic())):
                return
            self.say(f"nemesis: {fault}")
            try:
                entry = getattr(self, "_" + fault.kind.replace("-", "_"))(fault, n)
            except Exception as exc:  # the harness reports it; this target stops here
                self.errors.append(f"seed {self.seed}: {fault} failed: {exc}")
                return
            self.log.append({"kind": fault.kind, "target": fault.target, **entry})

    def _pause(self, seconds: float) -> None:
        self.stop.wait(seconds)  # the pause is the fault itself

    def _sub_kill(self, fault: Fault, _: int) -> dict[str, Any]:
        return self._kill_and_restart(fault)

    def _broker_kill(self, fault: Fault, _: int) -> dict[str, Any]:
        return self._kill_and_restart(fault)

    def _kill_and_restart(self, fault: Fault) -> dict[str, Any]:
        proc = self.world.proc(fault.target)
        start = time.time()
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(STOP_TIMEOUT_S)
        self._pause(fault.duration)
        self.world.restart(fault.target)
        return {"pid": proc.popen.pid, "start": start, "end": time.time(), "fired": True}

    def _broker_clock(self, fault: Fault, _: int) -> dict[str, Any]:
        at = time.time()
        self.world.step_clock(fault.shift)
        return {"start": at, "end": at, "shift": fault.shift, "fired": True}

    def _sub_stop(self, fault: Fault, _: int) -> dict[str, Any]:
        return self._stop_and_resume(fault)

    def _broker_stop(self, fault: Fault, _: int) -> dict[str, Any]:
        return self._stop_and_resume(fault)

    def _stop_and_resume(self, fault: Fault) -> dict[str, Any]:
        proc = self.world.proc(fault.target)
        start = time.time()
        proc.popen.send_signal(signal.SIGSTOP)
        self._pause(fault.duration)
        proc.popen.send_signal(signal.SIGCONT)
        return {"pid": proc.popen.pid, "start": start, "end": time.time(), "fired": True}

    def _sub_takeover(self, fault: Fault, _: int) -> dict[str, Any]:
        """Freeze the subscriber, start another process with its id (it takes the id
        over), thaw the old one (a zombie now) and stop it after ZOMBIE_RUN_S. The log's
        pid and times are the old process's freeze: the checker holds the events it
        handled before as possibly handled again, and nothing it handles after."""
        old = self.world.proc(fault.target)
        start = time.time()
        old.popen.send_signal(signal.SIGSTOP)
        try:
            self.world.restart(fault.target)
            self._pause(max(0.0, start + fault.duration - time.time()))
        finally:
            old.popen.send_signal(signal.SIGCONT)
        end = time.time()
        self._pause(ZOMBIE_RUN_S)
        code = old.terminate()
        return {"pid": old.popen.pid, "start": start, "end": end, "exit_code": code, "fired": True}

    def _sub_term(self, fault: Fault, _: int) -> dict[str, Any]:
        proc = self.world.proc(fault.target)
        start = time.time()
        code = proc.terminate()
        self.world.restart(fault.target)
        end = time.time()
        return {"pid": proc.popen.pid, "start": start, "end": end, "exit_code": code, "fired": True}

    def _drop_acks(self, fault: Fault, n: int) -> dict[str, Any]:
        self.world.proc(fault.target).terminate()
        seed = str(self.seed * 100 + n)
        faulty = self.world.restart(fault.target, "--fault", DROP_ACKS, "--fault-seed", seed)
        start = time.time()
        self._pause(fault.duration)
        end = time.time()
        faulty.terminate()
        self.world.restart(fault.target)
        return {"pid": faulty.popen.pid, "start": start, "end": end, "fired": True}

    def _crash_after(self, fault: Fault, _: int) -> dict[str, Any]:
        self.world.proc(fault.target).terminate()
        faulty = self.world.restart(fault.target, "--fault", f"crash-after:{fault.count}")
        start = time.time()
        deadline = time.monotonic() + fault.duration
        while faulty.alive and time.monotonic() < deadline and not self.stop.is_set():
            try:
                faulty.popen.wait(0.1)
            except subprocess.TimeoutExpired:  # look at the deadline and the stop flag again
                continue
        end = time.time()
        code = faulty.popen.poll()
        if code is None:  # too few events reached it: end the phase gracefully
            code = faulty.terminate()
        self.world.restart(fault.target)
        return {
            "pid": faulty.popen.pid,
            "start": start,
            "end": end,
            "exit_code": code,
            "fired": code == CRASH_EXIT_CODE,
        }
