"""signals_to_main_thread: threads started inside block SIGINT and SIGTERM (so the kernel
delivers them to the main thread, where Python runs handlers); the main thread does not."""

from __future__ import annotations

import signal
import threading

from channel_client.runtime import STOP_SIGNALS, join_in_slices, signals_to_main_thread


def blocked_now() -> set[signal.Signals]:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_threads_started_inside_leave_the_stop_signals_to_the_main_thread() -> None:
    seen: dict[str, set[signal.Signals]] = {}

    def record(name: str) -> None:
        seen[name] = blocked_now()
        if name == "outer":  # a thread it starts inherits its mask
            inner = threading.Thread(target=record, args=("inner",))
            inner.start()
            inner.join(5.0)

    with signals_to_main_thread():
        outer = threading.Thread(target=record, args=("outer",))
        outer.start()
    outer.join(5.0)
    after = threading.Thread(target=record, args=("after",))
    after.start()
    after.join(5.0)

    assert seen["outer"] >= STOP_SIGNALS and seen["inner"] >= STOP_SIGNALS
    assert not STOP_SIGNALS & seen["after"]
    assert not STOP_SIGNALS & blocked_now()


def test_join_in_slices_waits_for_the_thread_or_the_timeout() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, args=(30,), daemon=True)
    thread.start()
    join_in_slices(thread, 0.05)  # shorter than a slice: one short wait
    assert thread.is_alive()
    release.set()
    join_in_slices(thread, 30)
    assert not thread.is_alive()
