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


def test_the_same_faults_with_a_partition_per_event() -> None:
    """Seed 95's faults with 2,000 partitions per publisher: every event lands in a
    partition of its own (a key per order), so what the broker keeps per partition (its
    owner, persisted before its first push; the set of partitions holding events; acks
    and deletes of scattered offsets) is what the broker SIGKILL and the lost acks test."""
    result = run_once(95, EVENTS, STREAM_S, partitions=2000)
    if not result.ok:
        pytest.fail(result.failure_message(), pytrace=False)
