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
