"""Messages that may repeat many times a second (refused frames, a push that keeps failing,
a broker going in and out of being busy) logged at most once per interval per kind, each
saying how many were left out since."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

LOG_EVERY_S = 10.0
"""The same kind of warning is logged at most once per this many seconds."""


class Throttle:
    """Logs a kind of message at most once per ``every_s``, saying how many were not."""

    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._every_s = every_s
        self._clock = clock
        self._last: dict[str, tuple[float, int]] = {}
        """Per kind: when it was last logged, and how many were left out since. The kinds
        are a fixed few per caller (never built from what a caller sends)."""

    def info(self, kind: str, message: str, *args: Any) -> None:
        self._emit(logging.INFO, kind, message, args, False)

    def warning(self, kind: str, message: str, *args: Any, exc_info: bool = False) -> None:
        self._emit(logging.WARNING, kind, message, args, exc_info)

    def error(self, kind: str, message: str, *args: Any, exc_info: bool = False) -> None:
        self._emit(logging.ERROR, kind, message, args, exc_info)

    def _emit(
        self, level: int, kind: str, message: str, args: tuple[Any, ...], exc_info: bool
    ) -> None:
        now = self._clock()
        last, skipped = self._last.get(kind, (-math.inf, 0))
        if now - last < self._every_s:
            self._last[kind] = (last, skipped + 1)
            return
        self._last[kind] = (now, 0)
        more = f" ({skipped} more since the last report)" if skipped else ""
        self._log.log(level, message + more, *args, exc_info=exc_info)
