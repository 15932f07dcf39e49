"""Publishing a batch file (JSON lines, CSV, Parquet), directly or through a plan (§10).

``never``: rows are read in file order, checked with the plan's own rules (invalid ones are
counted and named by line, not sent), and published in batches; the channel orders each
batch.
``always`` (or ``auto`` at or above the threshold): the ``spark_partitions`` job groups the
batch by (publisher, partition), orders each group and balances the groups over the
subscribers, dropping duplicates as the channel would (the same publisher and id, or the
same id on a channel with ids unique per channel: :meth:`Publisher.channel_id_scope`, so
the plan never drops an event the direct path would have published); the publisher then
sends the plan block by block, in plan order (the plan's
rejects have no line numbers: Spark reads a file in splits). Either way a progress bar shows
events sent.
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
REJECT_LOCATIONS = 10
"""Invalid rows named by line in the summary; the rest are counted."""


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
    reject_where: list[str] = field(default_factory=list)
    """Where the first :data:`REJECT_LOCATIONS` invalid rows are (``line 7``, or
    ``part-1.jsonl line 7`` in a directory); empty for a plan (Spark knows no lines)."""
    planned: bool = False
    plan_summary: str = ""

    def rejects_line(self) -> str:
        """One line: how many rows were invalid, and where the first ones are."""
        rows = "row was" if self.rejected == 1 else "rows were"
        line = f"{self.rejected} invalid {rows} not published"
        if not self.reject_where:
            return line + " (a Spark plan knows no line numbers: --spark never names them)"
        more = self.rejected - len(self.reject_where)
        return f"{line}: {', '.join(self.reject_where)}" + (f" and {more} more" if more else "")


def publish_file(
    publisher: Publisher,
    path: str,
    mode: SparkMode,
    batch_size: int,
    subscribers: int,
    threshold_rows: int = DEFAULT_SPARK_THRESHOLD_ROWS,
    progress: bool = True,
    stop: threading.Event | None = None,
    wait_when_full: bool = False,
    spark_master: str | None = None,
    driver_host: str | None = None,
) -> FileReport:
    """Publish every valid event of a batch file (until ``stop`` is set); raises
    spark_partitions' PlanError (InputError, EngineUnavailable) with a one-line reason.
    ``wait_when_full``: a QueueFull is waited out (see Publisher.publish_all).
    ``spark_master``/``driver_host``: where a Spark plan runs (None: local, 127.0.0.1)."""
    from spark_partitions.engine import estimate_rows
    from spark_partitions.formats import detect_format

    fmt = detect_format(path)
    rows = estimate_rows(path, fmt)
    if mode is SparkMode.ALWAYS or (mode is SparkMode.AUTO and rows >= threshold_rows):
        from spark_partitions.config import DEFAULT_DRIVER_HOST, SparkSettings

        spark = SparkSettings(spark_master, driver_host or DEFAULT_DRIVER_HOST)
        return _publish_planned(
            publisher, path, fmt, batch_size, subscribers, progress, stop, wait_when_full, spark
        )
    report = FileReport(PublishTotals(), rows=rows)
    events = _valid_rows(path, fmt, report)
    with _bar(rows, progress, "publishing") as bar:
        report.totals = publisher.publish_all(
            _counted(events, bar), batch_size, wait_when_full, stop=stop
        )
    return report


def _publish_planned(
    publisher: Publisher,
    path: str,
    fmt: Any,
    batch_size: int,
    subscribers: int,
    progress: bool,
    stop: threading.Event | None,
    wait_when_full: bool,
    spark: Any,
) -> FileReport:
    from spark_partitions.blocks import iter_blocks
    from spark_partitions.config import PlanConfig
    from spark_partitions.engine import Engine, Request, run

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines are noise here
    config = PlanConfig(subscribers, id_scope=publisher.channel_id_scope())
    with tempfile.TemporaryDirectory(prefix="plan-") as plan_dir:
        request = Request(path, plan_dir, fmt, config, Engine.SPARK, spark=spark)
        outcome = run(request)
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
                    _counted(map(_event, events), bar), batch_size, wait_when_full, stop=stop
                )
                report.totals.merge(block)
                if block.stopped:
                    break
    return report


def _valid_rows(path: str, fmt: Any, report: FileReport) -> Iterator[dict[str, Any]]:
    """The events of the valid rows; invalid ones are counted in ``report``, the first
    few named by where they are and why."""
    from spark_partitions.formats import local_path
    from spark_partitions.reader import read_located_rows, source_text
    from spark_partitions.rules import Clean, check

    root = local_path(path)
    for location, row in read_located_rows(path, fmt):
        checked = row.reason if row.values is None else check(row.values, DEFAULT_MAX_PAYLOAD_BYTES)
        if isinstance(checked, Clean):
            yield _event(checked._asdict())
            continue
        report.rejected += 1
        if len(report.reject_where) < REJECT_LOCATIONS:
            where = str(location)
            if location.file != root:  # one of a directory's files
                where = f"{location.file.relative_to(root)} {where}"
            report.reject_where.append(where)
            if len(report.reject_examples) < REJECT_EXAMPLES:
                text = source_text(row.source)[:120]
                report.reject_examples.append(f"{where}: {checked}: {text}")


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
