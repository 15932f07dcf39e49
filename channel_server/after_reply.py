"""Work a served call leaves for its worker thread, done once the call's reply is sent.

An ack usually makes work for the member that sent it: its next batch. Handing that push
to the dispatch pool wakes another thread, and on a busy broker each hand-off costs
context switches while threads wait for the GIL (docs/benchmarks.md, "What a push
costs"). The worker thread that served the ack makes the push itself once its reply is on
its way: the subscriber is not kept waiting, and the connection's next request is read
when the push is done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)
_local = threading.local()
"""``tasks``: what the request this thread serves deferred (None: serving none)."""


@contextmanager
def serving() -> Iterator[None]:
    """Around one served request: what it defers runs when the block ends, after the
    reply, in order. A task that fails is logged and the others still run: each holds
    work that nothing else would do (a member queued for a push)."""
    tasks: list[Callable[[], None]] = []
    _local.tasks = tasks
    try:
        yield
    finally:
        _local.tasks = None
        for task in tasks:
            try:
                task()
            except Exception:
                log.exception("work after a reply failed: %r", task)


def defer(task: Callable[[], None]) -> bool:
    """Run ``task`` once the current request's reply is sent. False outside a served
    request (a test calling a channel directly, a oneway call's own thread): the caller
    does it another way."""
    tasks: list[Callable[[], None]] | None = getattr(_local, "tasks", None)
    if tasks is None:
        return False
    tasks.append(task)
    return True
