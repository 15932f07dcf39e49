"""A thread that does one round of some work every interval until it is stopped: for
work that must not wait in the dispatch pool behind pushes to frozen subscribers (the
lease renewals, the name-server checks). Its owner starts and stops it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Rounds:
    """``work`` every ``interval_s`` on a thread named ``name``, between :meth:`start` and
    :meth:`stop`; a round that raises is logged (``failed``) and the next one runs."""

    def __init__(
        self, name: str, interval_s: float, work: Callable[[], object], failed: str
    ) -> None:
        self.interval_s = interval_s
        self._work = work
        self._failed = failed
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout_s: float) -> None:
        """End the rounds: the one in hand finishes (waited for at most ``timeout_s``)."""
        self._stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            try:
                self._work()
            except Exception:
                log.exception(self._failed)
