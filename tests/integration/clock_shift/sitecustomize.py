"""Loaded by Python at start-up in a test's child process whose ``PYTHONPATH`` begins here:
its wall clock (``time.time``, ``time.time_ns``) reads off by the seconds written in the
file ``CLOCK_SHIFT_FILE`` (read again whenever it changes), as when NTP, a VM restored
from a snapshot or an operator steps it. The monotonic clocks are left alone, as such a
step leaves them. (libfaketime would do this below Python, but its 0.9.10 breaks
CPython's timed waits: ``time.sleep`` fails with EINVAL, or a ``Lock.acquire`` timeout
never ends.)
"""

import os
import time

_path = os.environ["CLOCK_SHIFT_FILE"]
_time = time.time
_seen = (-1, 0.0)  # (the file's mtime_ns, its shift)


def _shift() -> float:
    global _seen
    changed = os.stat(_path).st_mtime_ns
    if changed != _seen[0]:
        with open(_path) as f:
            _seen = (changed, float(f.read()))
    return _seen[1]


time.time = lambda: _time() + _shift()
time.time_ns = lambda: int(time.time() * 1e9)
