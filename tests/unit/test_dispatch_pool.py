"""The dispatch pool runs tasks now or after a delay, and a delay wakes one worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from channel_server import dispatch
from channel_server.dispatch import DispatchPool
from tests.integration.procs import wait_until

LONG_IDLE_S = 30.0
"""Patched in for IDLE_WAIT_S: no worker wakes on its own while a test runs."""


class Waits:
    """Which workers wait on the pool's condition now, and with what timeout."""

    def __init__(self, pool: DispatchPool) -> None:
        self.now: dict[str, float | None] = {}
        self._lock = threading.Lock()
        inner = pool._cond.wait

        def wait(timeout: float | None = None) -> bool:
            name = threading.current_thread().name
            with self._lock:
                self.now[name] = timeout
            try:
                return inner(timeout)
            finally:
                with self._lock:
                    self.now.pop(name, None)

        pool._cond.wait = wait  # type: ignore[method-assign]

    def timeouts(self) -> list[float | None]:
        with self._lock:
            return sorted(self.now.values(), key=lambda t: LONG_IDLE_S if t is None else t)


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[DispatchPool]:
    monkeypatch.setattr(dispatch, "IDLE_WAIT_S", LONG_IDLE_S)
    p = DispatchPool(4, name="test-pool")
    yield p
    p.stop()


def recorder() -> tuple[list[tuple[str, float]], Callable[[str], Callable[[], None]]]:
    ran: list[tuple[str, float]] = []

    def task(name: str) -> Callable[[], None]:
        return lambda: ran.append((name, time.monotonic()))

    return ran, task


def test_tasks_run_and_a_failing_one_does_not_stop_its_worker(pool: DispatchPool) -> None:
    pool.start()
    ran, task = recorder()

    def boom() -> None:
        raise RuntimeError("a member's trouble")

    for _ in range(4):
        pool.submit(boom)
    for n in range(8):
        pool.submit(task(f"t{n}"))
    wait_until(lambda: len(ran) == 8, what="every task")
    assert sorted(name for name, _ in ran) == [f"t{n}" for n in range(8)]


def test_delayed_tasks_run_in_due_order_and_never_early(pool: DispatchPool) -> None:
    pool.start()
    ran, task = recorder()
    start = time.monotonic()
    pool.submit(task("late"), 0.4)
    pool.submit(task("early"), 0.1)  # due before the task a worker already waits for
    pool.submit(task("now"))
    wait_until(lambda: len(ran) == 3, what="the delayed tasks")
    assert [name for name, _ in ran] == ["now", "early", "late"]
    at = dict(ran)
    assert at["early"] - start >= 0.1 and at["late"] - start >= 0.4
    assert at["early"] < start + 0.4, "the earlier task waited for the later one"


def test_one_worker_waits_for_a_delayed_task_the_rest_for_work(pool: DispatchPool) -> None:
    """Workers that finish while a delayed task is pending do not all wake when it is due
    (each wake-up of an idle thread is a context switch and a turn at the GIL)."""
    waits = Waits(pool)
    pool.start()
    wait_until(lambda: len(waits.timeouts()) == 4, what="four idle workers")
    ran, task = recorder()
    pool.submit(task("delayed"), 20.0)
    for n in range(8):
        pool.submit(task(f"t{n}"))
    wait_until(lambda: len(ran) == 8, what="the tasks due now")
    wait_until(lambda: len(waits.timeouts()) == 4, what="the workers idle again")
    timeouts = waits.timeouts()
    timed = [t for t in timeouts if t is not None and t < LONG_IDLE_S]
    assert len(timed) == 1 and 0 < timed[0] <= 20.0, timeouts
    assert [name for name, _ in ran if name == "delayed"] == []


def test_the_next_worker_takes_over_the_wait_when_the_timer_takes_work(
    pool: DispatchPool,
) -> None:
    waits = Waits(pool)
    pool.start()
    wait_until(lambda: len(waits.timeouts()) == 4, what="four idle workers")
    ran, task = recorder()
    pool.submit(task("delayed"), 0.3)
    wait_until(lambda: sum(t is not None and t < 1 for t in waits.timeouts()) == 1, what="a timer")
    for n in range(4):  # whichever worker these wake, the delayed task still runs on time
        pool.submit(task(f"t{n}"))
    wait_until(lambda: any(name == "delayed" for name, _ in ran), what="the delayed task")
    assert len(ran) == 5


def test_a_task_due_after_the_timers_wakes_no_worker(pool: DispatchPool) -> None:
    """The timer worker looks again when it wakes; only a task due sooner, or now, needs
    a worker woken."""
    waits = Waits(pool)
    pool.start()
    wait_until(lambda: len(waits.timeouts()) == 4, what="four idle workers")
    ran, task = recorder()
    pool.submit(task("first"), 0.3)
    wait_until(lambda: pool._timer is not None, what="a timer")
    notified: list[int] = []
    inner = pool._cond.notify

    def notify(n: int = 1) -> None:
        notified.append(n)
        inner(n)

    pool._cond.notify = notify  # type: ignore[method-assign]
    pool.submit(task("later"), 0.5)
    assert notified == []
    pool.submit(task("sooner"), 0.1)
    pool.submit(task("now"))
    assert notified == [1, 1]
    wait_until(lambda: len(ran) == 4, what="every task")
    assert [name for name, _ in ran] == ["now", "sooner", "first", "later"]


def test_stop_ends_the_workers_and_drops_what_is_pending(pool: DispatchPool) -> None:
    pool.start()
    ran, task = recorder()
    pool.submit(task("never"), 20.0)
    pool.stop()
    assert not any(t.is_alive() for t in pool._threads)
    pool.submit(task("after"))
    assert ran == [] and pool._due == []


SLOW_S = 0.3
"""The tests' SLOW_TASK_S: long enough that a quick task is not taken for a slow one on a
busy machine (the tests below only bound times from below)."""


@pytest.fixture
def spared(monkeypatch: pytest.MonkeyPatch) -> Iterator[DispatchPool]:
    """Two workers that take every task and two spares."""
    monkeypatch.setattr(dispatch, "IDLE_WAIT_S", LONG_IDLE_S)
    p = DispatchPool(4, name="test-spared", concurrency=2, slow_s=SLOW_S)
    yield p
    p.stop()


def blocker(started: list[float], release: threading.Event) -> Callable[[], None]:
    """A task that waits to be released, like a push to a frozen subscriber."""

    def task() -> None:
        started.append(time.monotonic())
        release.wait(30.0)

    return task


def test_a_spare_may_start_a_task_only_beside_slow_ones_or_a_full_one() -> None:
    p = DispatchPool(4, name="test-rule", concurrency=2, slow_s=SLOW_S)
    now = 1000.0
    p._due = [(now, 0, False, lambda: None)]
    p._started = {1: now - 0.01, 2: now - 0.02}
    assert p._may_take(False, now) and not p._may_take(True, now)
    p._started = {1: now - 0.01, 2: now - 2 * SLOW_S}  # a push to a frozen subscriber
    assert p._may_take(True, now)
    p._started = {1: now - 0.01, 2: now - 2 * SLOW_S, 3: now - 0.03}  # a spare took one
    assert not p._may_take(True, now)
    p._due = [(now, 1, True, lambda: None)]  # a full push gains nothing by waiting
    assert p._may_take(True, now)


def test_the_two_workers_take_every_task_while_they_are_quick(spared: DispatchPool) -> None:
    """With no task slow, at most two run at once, however many are due."""
    spared.start()
    running: list[int] = []
    most = [0]
    lock = threading.Lock()
    pace = threading.Event()  # never set

    def task() -> None:
        with lock:
            running.append(1)
            most[0] = max(most[0], len(running))
        pace.wait(0.002)  # a quick push's round trip, well under SLOW_S
        with lock:
            running.pop()

    done: list[int] = []
    for _ in range(60):
        spared.submit(lambda: (task(), done.append(1)))
    wait_until(lambda: len(done) == 60, what="every task")
    assert most[0] == 2


def test_carry_on_restarts_the_clock_and_yields_to_a_task_due(spared: DispatchPool) -> None:
    """A worker going on with more of its own work (the next push to one member) is not
    one slow task: its clock starts again, so no spare joins it; with another task due it
    hands its work back (to a worker that takes every task, not a spare)."""
    spared.start()
    answers: list[tuple[float, bool]] = []
    pace = threading.Event()  # never set: each part of a run waits 10 ms on it

    def run() -> None:
        while (go_on := spared.carry_on()) or not answers:
            answers.append((time.monotonic(), go_on))
            pace.wait(0.01)
        answers.append((time.monotonic(), go_on))

    ran: list[str] = []
    spared.submit(run)
    spared.submit(run)
    wait_until(lambda: len(answers) >= 4, what="two runs")
    first = answers[0][0]
    wait_until(lambda: answers[-1][0] >= first + 2 * SLOW_S, what="runs longer than SLOW_S")
    with spared._cond:
        assert spared._quick(time.monotonic()) == 2, "a run of quick parts counts as slow"
    spared.submit(lambda: ran.append(threading.current_thread().name))
    wait_until(lambda: len(ran) == 1, what="the task due")
    assert ran[0] in {"test-spared-0", "test-spared-1"}, ran
    assert any(not go_on for _, go_on in answers), "no run handed its work back"


@pytest.mark.parametrize("full", [False, True])
def test_beside_two_busy_workers_a_spare_takes_a_full_task_at_once_else_after_slow_s(
    spared: DispatchPool, full: bool
) -> None:
    """Two frozen pushes do not stall the pool for their ack timeout: a spare takes the
    next task once they have run SLOW_S, not before (fewer short pushes at once, fuller
    ones); a full push gains nothing by waiting, so a spare takes it at once."""
    spared.start()
    release = threading.Event()
    started: list[float] = []
    ran, task = recorder()
    try:
        spared.submit(blocker(started, release))
        spared.submit(blocker(started, release))
        wait_until(lambda: len(started) == 2, what="two busy workers")
        with spared._cond:  # the pool's own start times: each is taken just before the task's
            busy_since = max(spared._started.values())
        spared.submit(task("next"), full=full)
        wait_until(lambda: len(ran) == 1, what="a spare taking the next task")
        if full:
            assert ran[0][1] < max(started) + SLOW_S, "the full task waited for a turn"
        else:
            assert ran[0][1] >= busy_since + SLOW_S, "a spare ran a task beside quick ones"
    finally:
        release.set()
