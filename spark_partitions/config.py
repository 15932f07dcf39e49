"""Settings of a planning run, with their documented defaults."""

from __future__ import annotations

from dataclasses import dataclass

from spark_partitions.rules import DEFAULT_MAX_PAYLOAD_BYTES

DEFAULT_SHUFFLE_PARTITIONS = 4
DEFAULT_REJECT_EXAMPLES = 20
# Below this many input rows ``--engine auto`` uses the reference. On one machine Spark never
# won on wall time (docs/spark.md: its start-up alone outlasts the reference's whole run),
# so the bound is the reference's memory: about 1 KB per event, 3 GB here.
DEFAULT_AUTO_SPARK_ROWS = 3_000_000


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """One planning run.

    ``subscribers``: slots to balance the blocks over (at least 1).
    ``max_payload_bytes``: longest valid payload in UTF-8 bytes (DESIGN §3: 1 MiB).
    ``shuffle_partitions``: Spark shuffle partitions, hence block files (Spark's 200 is far
    too many for a small cluster; raise it for a big one).
    ``reject_examples``: rejected rows echoed in the run summary (all go to ``rejects/``).
    """

    subscribers: int
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS
    reject_examples: int = DEFAULT_REJECT_EXAMPLES

    def __post_init__(self) -> None:
        for name in ("subscribers", "max_payload_bytes", "shuffle_partitions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.reject_examples < 0:
            raise ValueError(f"reject_examples must be >= 0, got {self.reject_examples}")
