"""Where the reference puts rejected rows: ``rejects/`` as JSON lines, plus counts.

Each line is ``{"reason": ..., "record": ...}`` like the Spark job's rejects dataset; the
first few are also kept as examples for the run summary.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TextIO


class RejectSink:
    """Writes every rejected row, counts them by reason, keeps the first few."""

    def __init__(self, handle: TextIO, examples: int) -> None:
        self._handle = handle
        self._limit = examples
        self.reasons: Counter[str] = Counter()
        self.examples: list[dict[str, str]] = []

    def add(self, reason: str, record: str) -> None:
        self.reasons[str(reason)] += 1
        line = {"reason": str(reason), "record": record}
        self._handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        if len(self.examples) < self._limit:
            self.examples.append(line)

    @property
    def total(self) -> int:
        return sum(self.reasons.values())
