"""What a planning run reports besides ``plan.json``: rejects by reason and a few examples."""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_partitions.plan import Plan


@dataclass(frozen=True, slots=True)
class Outcome:
    """The plan an engine wrote, how many rows each reason rejected, and examples."""

    plan: Plan
    engine: str
    reject_reasons: dict[str, int] = field(default_factory=dict)
    reject_examples: list[dict[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the terminal."""
        plan = self.plan
        line = (
            f"{self.engine}: {plan.total_events} events in {len(plan.blocks)} blocks over "
            f"{plan.subscribers} slots, skew {plan.skew}; "
            f"{plan.duplicates_dropped} duplicates dropped, {plan.rejected} rejected"
        )
        if self.reject_reasons:
            reasons = ", ".join(f"{r}: {n}" for r, n in sorted(self.reject_reasons.items()))
            line += f" ({reasons})"
        return line
