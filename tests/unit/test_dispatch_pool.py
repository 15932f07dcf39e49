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
    """Which threads wait on one of the pool's conditions now (the workers', else
    ``cond``), and with what timeout."""

    def __init__(self, pool: DispatchPool, cond: threading.Condition | None = None) -> None:
        self.now: dict[str, float | None] = {}
        self._lock = threading.Lock()
        cond = pool._cond if cond is None else cond
        inner = cond.wait

        def wait(timeout: float | None = None) -> bool:
            name = threading.current_thread().name
            with self._lock:
                self.now[name] = timeout
            try:
                return inner(timeout)
            finally:
                with self._lock:
                    self.now.pop(name, None)

        cond.wait = wait  # type: ignore[method-assign]

    def timeouts(self) -> list[float | None]:
        with self._lock:
            return sorted(self.now.values(), key=lambda t: LONG_IDLE_S if t is None else t)

    def of(self, count: int) -> list[float | None] | None:
        """The timeouts, from one reading, if ``count`` threads wait; else None."""
        timeouts = self.timeouts()
        return timeouts if len(timeouts) == count else None


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
    """A task due before the one a worker already waits for runs when it is due, not
    after the other (which is due long after this test waits: no bound on how late a
    busy machine runs a task), and no task runs before it is due."""
    pool.start()
    ran, task = recorder()
    start = time.monotonic()  # before each submit computes its due time
    pool.submit(task("late"), 20.0)
    pool.submit(task("early"), 0.1)  # due before the task a worker already waits for
    pool.submit(task("now"))
    wait_until(lambda: len(ran) == 2, what="the tasks due first")
    assert sorted(name for name, _ in ran) == ["early", "now"], ran
    assert dict(ran)["early"] - start >= 0.1, "a delayed task ran early"


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
    # One reading: a worker woken late leaves the waits for a moment and waits again.
    timeouts = wait_until(lambda: waits.of(4), what="the workers idle again")
    timed = [t for t in timeouts if t is not None and t < LONG_IDLE_S]
    assert len(timed) == 1 and 0 < timed[0] <= 20.0, timeouts
    assert [name for name, _ in ran if name == "delayed"] == []


def test_the_next_worker_takes_over_the_wait_when_the_timer_takes_work(
    pool: DispatchPool,
) -> None:
    """When the worker waiting for a delayed task (the timer) takes work due now, another
    waits for the delayed task in its place, else it runs only when a worker looks again."""
    waits = Waits(pool)
    pool.start()
    wait_until(lambda: len(waits.timeouts()) == 4, what="four idle workers")
    ran, task = recorder()
    pool.submit(task("delayed"), 20.0)  # due long after this test
    wait_until(lambda: pool._timer is not None, what="a timer")
    gate = threading.Event()
    busy: list[str] = []

    def hold() -> None:
        busy.append(threading.current_thread().name)
        gate.wait(10.0)

    try:
        for _ in range(4):  # one task for each worker: the timer takes one too
            pool.submit(hold)
        wait_until(lambda: len(busy) == 4, what="every worker busy, the timer too")
    finally:
        gate.set()
    timeouts = wait_until(lambda: waits.of(4), what="the workers idle again")
    timed = [t for t in timeouts if t is not None and t < LONG_IDLE_S]
    assert len(timed) == 1 and 0 < timed[0] <= 20.0, timeouts
    assert ran == []


def test_a_task_due_after_the_timers_wakes_no_worker(pool: DispatchPool) -> None:
    """The timer worker looks again when it wakes; only a task due sooner, or now, needs
    a worker woken (one: the task due sooner then has a worker waiting for it). The
    delayed tasks are due long after this test, so the timer never wakes in it."""
    waits = Waits(pool)
    pool.start()
    wait_until(lambda: len(waits.timeouts()) == 4, what="four idle workers")
    ran, task = recorder()
    first, later, sooner = task("first"), task("later"), task("sooner")
    pool.submit(first, 20.0)
    wait_until(lambda: pool._timer is not None, what="a timer")
    notified: list[int] = []
    inner = pool._cond.notify

    def notify(n: int = 1) -> None:
        notified.append(n)
        inner(n)

    pool._cond.notify = notify  # type: ignore[method-assign]
    pool.submit(later, 25.0)
    assert notified == []
    pool.submit(sooner, 10.0)
    pool.submit(task("now"))
    assert notified == [1, 1]
    wait_until(lambda: len(ran) == 1, what="the task due now")
    with pool._cond:
        assert [entry[3] for entry in sorted(pool._due)] == [sooner, first, later]
        sooner_due = pool._due[0][0]

    def waits_for_sooner() -> bool:
        with pool._cond:
            return pool._timer == sooner_due

    wait_until(waits_for_sooner, what="a worker waiting for the task due sooner")
    assert [name for name, _ in ran] == ["now"]


def test_stop_ends_the_workers_and_drops_what_is_pending(pool: DispatchPool) -> None:
    pool.start()
    ran, task = recorder()
    pool.submit(task("never"), 20.0)
    pool.stop()
    assert not any(t.is_alive() for t in pool._threads)
    pool.submit(task("after"))
    assert ran == [] and pool._due == []


SLOW_S = 0.3
"""The tests' SLOW_TASK_S where a spare must wait for it: long enough that a quick task
is not taken for a slow one on a busy machine (the tests only bound times from below)."""
QUIET_SLOW_S = 30.0
"""A SLOW_TASK_S no test reaches: no task turns slow, and a spare looks for work only when
it starts or is woken."""
RUN_SLOW_S = 1.0
"""The carry_on test's SLOW_TASK_S: its runs must go on longer than this, and a spare
joins them only if one is kept from the CPU this long."""


@pytest.fixture
def spared(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[float], DispatchPool]]:
    """Pools of two workers that take every task and two spares, with a given slow_s.

    The tests start the workers first and the spares when the scene is set
    (start_workers, start_spares): a spare that starts with a task due and fewer than
    two quick ones running may take it, by the rule, and would change the scene."""
    monkeypatch.setattr(dispatch, "IDLE_WAIT_S", LONG_IDLE_S)
    pools: list[DispatchPool] = []

    def make(slow_s: float) -> DispatchPool:
        pools.append(DispatchPool(4, name="test-spared", concurrency=2, slow_s=slow_s))
        return pools[-1]

    yield make
    for p in pools:
        p.stop()


WORKERS = {"test-spared-0", "test-spared-1"}


def start_workers(pool: DispatchPool) -> None:
    for thread in pool._threads[: pool._concurrency]:
        thread.start()


def start_spares(pool: DispatchPool) -> None:
    for thread in pool._threads[pool._concurrency :]:
        thread.start()


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


def test_the_two_workers_take_every_task_while_they_are_quick(
    spared: Callable[[float], DispatchPool],
) -> None:
    """With no task slow, at most two run at once, however many are due: spares that
    look for work while both workers run quick tasks and many more are due take none."""
    pool = spared(QUIET_SLOW_S)
    spare_waits = Waits(pool, pool._spares)
    start_workers(pool)
    running: list[int] = []
    most = [0]
    lock = threading.Lock()
    gate = threading.Event()  # holds the first two tasks until the spares have looked
    pace = threading.Event()  # never set

    def task() -> None:
        with lock:
            running.append(1)
            most[0] = max(most[0], len(running))
        gate.wait(10.0)
        pace.wait(0.002)  # a quick push's round trip
        with lock:
            running.pop()

    done: list[int] = []
    try:
        for _ in range(60):
            pool.submit(lambda: (task(), done.append(1)))
        wait_until(lambda: len(running) == 2, what="both workers busy")
        start_spares(pool)
        wait_until(
            lambda: len(spare_waits.timeouts()) == 2 or most[0] > 2,
            what="the spares looking for work, and waiting",
        )
    finally:
        gate.set()
    wait_until(lambda: len(done) == 60, what="every task")
    assert most[0] == 2


def test_carry_on_restarts_the_clock_and_yields_to_a_task_due(
    spared: Callable[[float], DispatchPool],
) -> None:
    """A worker going on with more of its own work (the next push to one member) is not
    one slow task: its clock starts again, so no spare joins it; with another task due it
    hands its work back (to a worker that takes every task, not a spare)."""
    pool = spared(RUN_SLOW_S)
    start_workers(pool)
    entered: list[tuple[int, float]] = []
    handed_back: list[str] = []
    finished = threading.Event()  # set by the test: the runs end

    def run() -> None:
        entered.append((threading.get_ident(), time.monotonic()))
        # Until both have started, False means the other run is due: going on keeps one
        # run on each worker (else this worker would take the other itself).
        while True:
            if not pool.carry_on() and len(entered) == 2:
                handed_back.append(threading.current_thread().name)
                return
            if finished.wait(0.01):  # each part of a run takes 10 ms
                return

    ran: list[str] = []
    try:
        pool.submit(run)
        pool.submit(run)
        wait_until(lambda: len(entered) == 2, what="two runs, one on each worker")
        start_spares(pool)
        runs = [ident for ident, _ in entered]
        assert len(set(runs)) == 2
        slow_from = max(at for _, at in entered) + RUN_SLOW_S  # each run began before

        def both_quick_after_slow_s() -> bool:
            with pool._cond:
                now = time.monotonic()
                starts = [pool._started.get(ident, 0.0) for ident in runs]
                return min(starts) >= slow_from and pool._quick(now) == 2

        wait_until(both_quick_after_slow_s, what="runs longer than slow_s counted as quick")
        pool.submit(lambda: ran.append(threading.current_thread().name))
        wait_until(lambda: len(ran) == 1, what="the task due")
        assert ran[0] in WORKERS, ran
        assert handed_back, "no run handed its work back"
    finally:
        finished.set()


@pytest.mark.parametrize("full", [False, True])
def test_beside_two_busy_workers_a_spare_takes_a_full_task_at_once_else_after_slow_s(
    spared: Callable[[float], DispatchPool], full: bool
) -> None:
    """Two frozen pushes do not stall the pool for their ack timeout: a spare takes the
    next task once one has run SLOW_S, not before (fewer short pushes at once, fuller
    ones); a full push gains nothing by waiting, so a spare takes it at once (here with a
    slow_s no test reaches: a spare that took it in time can only have taken it at once,
    woken for it)."""
    pool = spared(QUIET_SLOW_S if full else SLOW_S)
    spare_waits = Waits(pool, pool._spares)
    start_workers(pool)
    release = threading.Event()
    started: list[float] = []
    ran, task = recorder()
    try:
        pool.submit(blocker(started, release))
        pool.submit(blocker(started, release))
        wait_until(lambda: len(started) == 2, what="two busy workers")
        with pool._cond:  # the pool's own start times: each is taken just before the task's
            slow_from = min(pool._started.values()) + SLOW_S  # one slow is fewer than two quick
        if full:
            start_spares(pool)
            wait_until(lambda: len(spare_waits.timeouts()) == 2, what="the spares waiting")
            pool.submit(task("next"), full=True)
        else:  # the spares look for work as they start: a task is due, beside two quick ones
            pool.submit(task("next"))
            start_spares(pool)
        wait_until(lambda: len(ran) == 1, what="a spare taking the next task")
        if not full:
            assert ran[0][1] >= slow_from, "a spare ran a task beside quick ones"
    finally:
        release.set()
