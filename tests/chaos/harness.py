"""One chaos run for one seed: a durable broker, three subscribers and two publishers on
127.0.0.1, the nemesis during the stream, then the checker over what they recorded.

Every process is always cleaned up; a failed run keeps its tmp dir (process logs, the
fault log, the report) and every message names the seed, so ``--seed S`` replays it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channel_client.lookup import resolve_channel
from channel_server.wire import make_proxy
from tests.chaos.checker import Report, check, declared_dead_events, refused_again
from tests.chaos.nemesis import (
    BROKER,
    Fault,
    Nemesis,
    broker_stops,
    clock_steps,
    schedule,
    takeovers,
)
from tests.integration.procs import Cluster, Proc, ShiftedClock, wait_until

CHANNEL = "chaos"
SUBSCRIBERS = ("s1", "s2", "s3")
PUBLISHERS = ("P1", "P2")
SUBMITTING = frozenset({"P2"})
"""Publishers that send through ``Publisher.submit`` (``publish --submit``); the others
call ``publish`` for each batch."""
PREFETCH = 10
PARTITIONS = 8
BATCH_SIZE = 20
RETRY_FOR_S = 120
RESTART_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 90.0
ACTIVE_TIMEOUT_S = 30.0
PUBLISH_SLACK_S = 150.0
"""How much longer than the planned stream the publishers may take (broker restarts)."""
NEMESIS_TIMEOUT_S = 120.0


@dataclass
class RunResult:
    seed: int
    events: int
    stream_s: float
    report: Report
    tmp: Path
    seconds: float
    schedule: list[Fault]
    fault_log: list[dict[str, Any]]
    broker_args: tuple[str, ...] = ()
    partitions: int = PARTITIONS

    @property
    def ok(self) -> bool:
        return self.report.ok

    def failure_message(self) -> str:
        extra = "".join(f"--broker-arg={arg} " for arg in self.broker_args)
        return (
            f"chaos seed {self.seed} FAILED (replay: scripts/chaos.sh --seed {self.seed} "
            f"{extra}--events {self.events} --stream-seconds {self.stream_s:g} "
            f"--partitions {self.partitions}; "
            f"tmp dir {self.tmp}):\n{self.report.summary()}"
        )


FLAKY = "fail-first:0.01"
"""Every subscriber's handler fails on 1 % of first deliveries: the retry succeeds, and the
rest of the partition must wait for it (the checker's order per partition would see an
event handled after a later one of its partition)."""


class ChaosWorld:
    """The processes of one run by target name; the nemesis restarts them through it."""

    def __init__(self, cluster: Cluster, broker_args: tuple[str, ...] = ()) -> None:
        self.cluster = cluster
        self.broker_args = broker_args
        """Added to every start of the broker (``--broker-arg``)."""
        self.sub_state = cluster.tmp / "sub-state"
        self.clock = ShiftedClock(cluster.tmp)
        """The broker's wall clock, which the nemesis steps (its every start reads it)."""
        self.brokers: list[Proc] = []
        self._procs: dict[str, Proc] = {}
        self._lock = threading.Lock()
        """Guards _procs and brokers (the nemesis has one thread per target)."""

    def proc(self, target: str) -> Proc:
        with self._lock:
            return self._procs[target]

    def restart(self, target: str, *extra: str) -> Proc:
        """Start ``target`` again with the same command (plus ``extra``); a subscriber
        waits until the channel answers, since the broker may be down too."""
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            try:
                if target == BROKER:
                    proc = self.cluster.broker(
                        CHANNEL,
                        extra=("--data-dir", str(self.cluster.data_dir(BROKER)), *self.broker_args),
                        env=self.clock.env,
                    )
                else:
                    wait_until(self.channel_answers, RESTART_TIMEOUT_S, f"{CHANNEL} answering")
                    proc = self.cluster.subscriber(
                        CHANNEL, target, "--state-dir", str(self.sub_state),
                        "--prefetch", str(PREFETCH), "--quiet", "--fault", FLAKY, *extra,
                    )  # fmt: skip
                break
            except AssertionError:  # it exited before ready (the broker went away again)
                if time.monotonic() > deadline:
                    raise
        with self._lock:
            self._procs[target] = proc
            if target == BROKER:
                self.brokers.append(proc)
        return proc

    def step_clock(self, seconds: float) -> None:
        self.clock.step(seconds)

    def stop_subscribers(self) -> None:
        with self._lock:
            procs = [p for name, p in self._procs.items() if name != BROKER]
        for proc in procs:
            proc.terminate()

    def channel_answers(self) -> bool:
        try:
            uri = resolve_channel("127.0.0.1", self.cluster.ns_port, CHANNEL)
            with make_proxy(uri, 2.0) as channel:
                channel.stats()
        except Exception:
            return False
        return True

    def broker_lines(self) -> list[tuple[float, str]]:
        with self._lock:
            return [line for proc in self.brokers for line in proc.stamped]

    def save_status(self, path: Path) -> None:
        """The channel's stats at the end of the run, for a post-mortem."""
        argv = ["-m", "channel_server", "status", CHANNEL, "--json", *self.cluster.ns]
        result = self.cluster.run(argv, timeout_s=20)
        path.write_text(result.stdout or result.stderr)

    def members_active(self) -> dict[str, bool] | None:
        """member id -> active, from ``channel_server status --json``; None if it failed."""
        argv = ["-m", "channel_server", "status", CHANNEL, "--json", *self.cluster.ns]
        result = self.cluster.run(argv, timeout_s=20)
        if result.returncode != 0:
            return None
        stats = json.loads(result.stdout)
        members = [m for s in stats for g in s["groups"].values() for m in g["members"]]
        return {m["id"]: m["active"] for m in members}


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every complete record line (a SIGKILL may tear the last one; it was not acked)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def publish(cluster: Cluster, pub_id: str, events: int, rate: float, partitions: int) -> Proc:
    argv = [
        "-m", "publisher", "publish", *cluster.ns, "--channel", CHANNEL, "--id", pub_id,
        "--count", str(events), "--partitions", str(partitions),
        "--batch-size", str(BATCH_SIZE), "--rate", f"{rate:.3f}",
        "--retry-for", str(RETRY_FOR_S), "--state-dir", str(cluster.tmp / "pub-state"), "--json",
    ]  # fmt: skip
    if pub_id in SUBMITTING:
        argv.append("--submit")
    return cluster.start(pub_id, argv, ready=None)


def publisher_errors(proc: Proc, events: int, timeout_s: float) -> list[str]:
    """Why a publisher's run does not count: a bad exit, or accepted + duplicates != N."""
    try:
        code = proc.popen.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return [f"{proc.name} still running after {timeout_s:.0f} s"]
    proc.kill()  # reaps it and joins the reader, so every output line is in
    figures = None
    for line in reversed(proc.lines):
        if line.startswith("{"):
            figures = json.loads(line)
            break
    if code != 0 or figures is None:
        return [f"{proc.name} exited {code}: {proc.lines[-3:]}"]
    if figures["accepted"] + figures["duplicates"] != events or figures["refused"]:
        return [f"{proc.name}: accepted + duplicates != {events} or refused: {figures}"]
    return []


def inactive_alive(world: ChaosWorld, timeout_s: float) -> list[str]:
    """Subscribers whose process runs but whose member is still not active at the end."""
    last: list[str] = list(SUBSCRIBERS)

    def all_active() -> bool:
        members = world.members_active()
        if members is None:
            return False
        alive = [s for s in SUBSCRIBERS if world.proc(s).alive]
        last[:] = [s for s in alive if not members.get(s, False)]
        return not last

    try:
        wait_until(all_active, timeout_s, "every running subscriber active")
    except AssertionError:
        return last
    return []


def run_once(
    seed: int,
    events: int = 1000,
    stream_s: float = 12.0,
    workdir: Path | None = None,
    keep: bool = False,
    say: Callable[[str], None] = print,
    broker_args: tuple[str, ...] = (),
    partitions: int = PARTITIONS,
) -> RunResult:
    """Run one seed end to end; the tmp dir is removed only when it passed and not ``keep``.
    ``broker_args``: flags added to every start of the broker; ``partitions``: each
    publisher's (many make most partitions hold a few events, and new ones appear)."""
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"chaos-seed{seed}-", dir=workdir))
    say(f"chaos seed {seed}: tmp dir {tmp}")
    faults = schedule(seed, stream_s, SUBSCRIBERS) + clock_steps(seed, stream_s)
    faults += broker_stops(seed, stream_s, faults)
    faults = sorted(faults + takeovers(seed, stream_s, faults, SUBSCRIBERS), key=lambda f: f.at)
    cluster = Cluster(tmp)
    world = ChaosWorld(cluster, broker_args)
    nemesis = Nemesis(world, faults, seed, say)
    try:
        report = _run(cluster, world, nemesis, events, stream_s, partitions)
    except Exception as exc:
        raise RuntimeError(f"chaos seed {seed}: the run broke ({exc}); tmp dir {tmp}") from exc
    finally:
        nemesis.stop.set()
        nemesis.join(NEMESIS_TIMEOUT_S)
        world.stop_subscribers()  # before the broker, so they leave cleanly
        cluster.close()
        _save(tmp, cluster, faults, nemesis)
    seconds = time.monotonic() - started
    result = RunResult(
        seed, events, stream_s, report, tmp, seconds, faults, nemesis.log, broker_args, partitions
    )
    (tmp / "report.txt").write_text(result.report.summary(examples=50) + "\n")
    if result.ok and not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _run(
    cluster: Cluster,
    world: ChaosWorld,
    nemesis: Nemesis,
    events: int,
    stream_s: float,
    partitions: int,
) -> Report:
    world.restart(BROKER)
    for sub in SUBSCRIBERS:
        world.restart(sub)
    for fault in nemesis.faults:
        nemesis.say(f"  planned {fault}")
    pubs = [publish(cluster, p, events, events / stream_s, partitions) for p in PUBLISHERS]
    nemesis.start()
    errors = [e for p in pubs for e in publisher_errors(p, events, stream_s + PUBLISH_SLACK_S)]
    if not nemesis.join(NEMESIS_TIMEOUT_S):
        errors.append("the nemesis did not finish in time")
    errors += nemesis.errors
    published = {p: [f"{p}-{n}" for n in range(1, events + 1)] for p in PUBLISHERS}
    wanted = {i for ids in published.values() for i in ids}

    def records() -> list[dict[str, Any]]:
        return [r for s in SUBSCRIBERS for r in read_records(cluster.record_path(CHANNEL, s))]

    with contextlib.suppress(AssertionError):  # the checker lists what is lost
        wait_until(lambda: wanted <= {r["id"] for r in records()}, DRAIN_TIMEOUT_S, "drain")
    inactive = inactive_alive(world, ACTIVE_TIMEOUT_S)
    world.save_status(cluster.tmp / "status-at-end.json")
    declared = declared_dead_events(world.broker_lines(), CHANNEL)
    report = check(published, records(), nemesis.log, declared, PREFETCH)
    report.inactive_alive = inactive
    report.errors = errors + stale_sessions(cluster)
    return report


def stale_sessions(cluster: Cluster) -> list[str]:
    """A subscriber that refused a live broker's pushes as of an older session (every
    life of its process: their output is read to the end)."""
    errors = []
    for sub in SUBSCRIBERS:
        lines = [line for proc in cluster.procs if proc.name == sub for line in proc.lines]
        if sessions := refused_again(lines):
            errors.append(f"{sub} refused the pushes of session(s) {sessions} again and again")
    return errors


def _save(tmp: Path, cluster: Cluster, faults: list[Fault], nemesis: Nemesis) -> None:
    """What a post-mortem needs: every process' stamped output, the plan and the log."""
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)
    for n, proc in enumerate(cluster.procs):
        text = "\n".join(f"{at:.3f} {line}" for at, line in proc.stamped)
        (logs / f"{n:02d}-{proc.name}-{proc.popen.pid}.log").write_text(text + "\n")
    (tmp / "schedule.txt").write_text("\n".join(str(f) for f in faults) + "\n")
    (tmp / "fault-log.json").write_text(json.dumps(nemesis.log, indent=1) + "\n")
