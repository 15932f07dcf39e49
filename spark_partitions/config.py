"""What a planning run is given and what it gives back: its settings with their documented
defaults, the errors that end it, and its :class:`Outcome`.

A leaf of the package (it imports only the rules and the plan), so every other module may
raise these errors and read these settings. Importing it never imports pyspark or pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_partitions.plan import Plan
from spark_partitions.rules import DEFAULT_MAX_PAYLOAD_BYTES, IdScope

DEFAULT_SHUFFLE_PARTITIONS = 4
DEFAULT_REJECT_EXAMPLES = 20
# Below this many input rows ``--engine auto`` uses the reference. On one machine Spark never
# won on wall time (docs/spark.md: its start-up alone outlasts the reference's whole run),
# so the bound is the reference's memory: about 1 KB per event, 3 GB here.
DEFAULT_AUTO_SPARK_ROWS = 3_000_000
DEFAULT_DRIVER_HOST = "127.0.0.1"
DEFAULT_APP_NAME = "spark-partitions"
DEFAULT_LOG_LEVEL = "ERROR"
# How the summary line names the dedupe of each id scope.
DUPLICATES_BY = {
    IdScope.PUBLISHER: "same publisher_id and id",
    IdScope.CHANNEL: "same id, any publisher",
}


# -- errors: the CLI turns each into a one-line reason and a non-zero exit, never a traceback
class PlanError(Exception):
    """Something about the request or the input makes a plan impossible."""


class InputError(PlanError):
    """The input is missing, unreadable or of an unknown format or shape."""


class EngineUnavailable(PlanError):
    """The requested engine cannot run here (for example pyspark is not installed)."""


# -- settings ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PlanConfig:
    """One planning run.

    ``subscribers``: slots to balance the blocks over (at least 1).
    ``max_payload_bytes``: longest valid payload in UTF-8 bytes (DESIGN §3: 1 MiB).
    ``shuffle_partitions``: Spark shuffle partitions, hence block files (Spark's 200 is far
    too many for a small cluster; raise it for a big one).
    ``reject_examples``: rejected rows echoed in the run summary (all go to ``rejects/``).
    ``id_scope``: where the target channel's ids are unique (``channel_server.events.
    IdScope``), hence what a duplicate is: the same ``(publisher_id, id)`` by default, the
    same id alone for ``channel``. Deduping wider than the channel would drop events it
    accepts, silently (DESIGN §11); a text value is turned into the enum (and checked).
    """

    subscribers: int
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS
    reject_examples: int = DEFAULT_REJECT_EXAMPLES
    id_scope: IdScope = IdScope.PUBLISHER

    def __post_init__(self) -> None:
        for name in ("subscribers", "max_payload_bytes", "shuffle_partitions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.reject_examples < 0:
            raise ValueError(f"reject_examples must be >= 0, got {self.reject_examples}")
        object.__setattr__(self, "id_scope", IdScope(self.id_scope))  # frozen: set once here

    @property
    def dedupe_key(self) -> tuple[str, ...]:
        """The columns two rows share when one is a duplicate of the other (every engine
        partitions its dedupe by these)."""
        return ("publisher_id", "id") if self.id_scope is IdScope.PUBLISHER else ("id",)


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """How to start Spark (notes PART B1).

    ``master``: a master URL, or None to leave it to spark-submit / spark-defaults.conf.
    ``driver_host``: address the driver binds to and advertises (127.0.0.1 by default,
    DESIGN §11; give an address the executors can reach when the master is a real cluster).
    ``shuffle_partitions``: ``spark.sql.shuffle.partitions`` (Spark's 200 costs 5x here).
    ``driver_memory``: JVM heap of the driver (only applies when this process starts the
    JVM), None for Spark's default.
    ``java_options``: extra JVM options of the driver (same caveat).
    ``codegen``: Spark's whole-stage code generation. Off by default: the plan is a one-shot
    job in a fresh JVM, and compiling the generated code cost more than it saved here
    (1M JSON lines: 36-42 s off against 41-50 s on, docs/spark.md).
    """

    master: str | None = None
    driver_host: str = DEFAULT_DRIVER_HOST
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS
    driver_memory: str | None = None
    java_options: str | None = None
    codegen: bool = False
    app_name: str = DEFAULT_APP_NAME
    log_level: str = DEFAULT_LOG_LEVEL


# -- the outcome ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Outcome:
    """The plan an engine wrote (besides ``plan.json``), how many rows each reason
    rejected, and a few rejected rows as examples."""

    plan: Plan
    engine: str
    reject_reasons: dict[str, int] = field(default_factory=dict)
    reject_examples: list[dict[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the terminal."""
        plan = self.plan
        duplicates = DUPLICATES_BY[IdScope(plan.id_scope)]
        line = (
            f"{self.engine}: {plan.total_events} events in {len(plan.blocks)} blocks over "
            f"{plan.subscribers} slots, skew {plan.skew}; "
            f"{plan.duplicates_dropped} duplicates dropped ({duplicates}), "
            f"{plan.rejected} rejected"
        )
        if self.reject_reasons:
            reasons = ", ".join(f"{r}: {n}" for r, n in sorted(self.reject_reasons.items()))
            line += f" ({reasons})"
        return line
