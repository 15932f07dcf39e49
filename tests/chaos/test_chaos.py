"""Two fixed seeds of the chaos suite against real processes (scripts/chaos.sh runs more).

Between them the two seeds draw every fault kind. Seed 93 also stops s1 for 7.98 s, long
enough for the broker to declare it dead (one 5 s ack timeout, then two 1 s probes), and
kills the broker while acks are being written: the current broker fails it (the member is
never readmitted; its stale push is processed again after SIGCONT). Seed 95 runs a broker
SIGKILL, a crash-after, a drop-acks phase and a subscriber SIGKILL.
"""

from __future__ import annotations

import pytest

from tests.chaos.harness import run_once

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.slow]
EVENTS = 1000
STREAM_S = 10.0


@pytest.mark.parametrize("seed", [93, 95])
def test_no_loss_no_reordering_no_unexplained_duplicates(seed: int) -> None:
    result = run_once(seed, EVENTS, STREAM_S)
    if not result.ok:
        pytest.fail(result.failure_message(), pytrace=False)
