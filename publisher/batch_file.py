"""Publishing a batch file (JSON lines, CSV, Parquet), directly or through a plan (§10).

``never``: rows are read in file order, checked with the plan's own rules (invalid ones are
counted and shown, not sent), and published in batches; the channel orders each batch.
``always`` (or ``auto`` at or above the threshold): the ``spark_partitions`` job groups the
batch by (publisher, partition), orders each group and balances the groups over the
subscribers; the publisher then sends the plan block by block, in plan order. Either way a
progress bar shows events sent.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tqdm import tqdm

from channel_server.events import DEFAULT_MAX_PAYLOAD_BYTES
from publisher.client import Publisher, PublishTotals

DEFAULT_SPARK_THRESHOLD_ROWS = 3_000_000
"""Rows from which ``auto`` plans with Spark. On a 2-core machine Spark's start-up (20-30 s)
outweighs its speed below a few million rows (docs/spark.md); on a cluster set it lower."""
REJECT_EXAMPLES = 5


class SparkMode(StrEnum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


@dataclass
class FileReport:
    """What publishing a file did."""

    totals: PublishTotals
    rows: int = 0
    rejected: int = 0
    reject_examples: list[str] = field(default_factory=list)
    planned: bool = False
    plan_summary: str = ""


def publish_file(
    publisher: Publisher,
    path: str,
    mode: SparkMode,
    batch_size: int,
    subscribers: int,
    threshold_rows: int = DEFAULT_SPARK_THRESHOLD_ROWS,
    progress: bool = True,
    stop: threading.Event | None = None,
) -> FileReport:
    """Publish every valid event of a batch file (until ``stop`` is set); raises
    spark_partitions' PlanError (InputError, EngineUnavailable) with a one-line reason."""
    from spark_partitions.engine import estimate_rows
    from spark_partitions.formats import detect_format

    fmt = detect_format(path)
    rows = estimate_rows(path, fmt)
    if mode is SparkMode.ALWAYS or (mode is SparkMode.AUTO and rows >= threshold_rows):
        return _publish_planned(publisher, path, fmt, batch_size, subscribers, progress, stop)
    report = FileReport(PublishTotals(), rows=rows)
    events = _valid_rows(path, fmt, report)
    with _bar(rows, progress, "publishing") as bar:
        report.totals = publisher.publish_all(_counted(events, bar), batch_size, stop=stop)
    return report


def _publish_planned(
    publisher: Publisher,
    path: str,
    fmt: Any,
    batch_size: int,
    subscribers: int,
    progress: bool,
    stop: threading.Event | None,
) -> FileReport:
    from spark_partitions.blocks import iter_blocks
    from spark_partitions.config import PlanConfig
    from spark_partitions.engine import Engine, Request, run

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines are noise here
    with tempfile.TemporaryDirectory(prefix="plan-") as plan_dir:
        outcome = run(Request(path, plan_dir, fmt, PlanConfig(subscribers), Engine.SPARK))
        plan = outcome.plan
        report = FileReport(
            PublishTotals(),
            rows=plan.total_events + plan.rejected,
            rejected=plan.rejected,
            planned=True,
            plan_summary=outcome.summary(),
        )
        report.reject_examples = [
            f"{e.get('reason')}: {str(e.get('record'))[:120]}"
            for e in outcome.reject_examples[:REJECT_EXAMPLES]
        ]
        with _bar(plan.total_events, progress, "publishing blocks") as bar:
            for _, events in iter_blocks(plan_dir):
                block = publisher.publish_all(
                    _counted(map(_event, events), bar), batch_size, stop=stop
                )
                report.totals.merge(block)
                if block.stopped:
                    break
    return report


def _valid_rows(path: str, fmt: Any, report: FileReport) -> Iterator[dict[str, Any]]:
    from spark_partitions.reader import read_rows, source_text
    from spark_partitions.rules import Clean, check

    for row in read_rows(path, fmt):
        checked = row.reason if row.values is None else check(row.values, DEFAULT_MAX_PAYLOAD_BYTES)
        if isinstance(checked, Clean):
            yield _event(checked._asdict())
            continue
        report.rejected += 1
        if len(report.reject_examples) < REJECT_EXAMPLES:
            report.reject_examples.append(f"{checked}: {source_text(row.source)[:120]}")


def _event(row: dict[str, Any]) -> dict[str, Any]:
    """The wire event of a checked row (its partition text back to an int when it was
    one) or of a plan block row (whose partition column already has the right type)."""
    partition = row["partition"]
    if row.get("partition_is_int"):
        partition = int(partition)
    return {
        "id": row["id"],
        "publisher_id": row["publisher_id"],
        "partition": partition,
        "timestamp": row["timestamp"],
        "payload": row["payload"],
    }


def _counted(events: Iterable[dict[str, Any]], bar: tqdm) -> Iterator[dict[str, Any]]:
    for event in events:
        bar.update(1)
        yield event


def _bar(total: int, enabled: bool, what: str) -> tqdm:
    return tqdm(total=total, disable=not enabled, unit="ev", desc=what, leave=False)
