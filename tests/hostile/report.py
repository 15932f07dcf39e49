"""The figures of a hostile run, one row per attack, printed as a table at the end.

Tests add a :class:`Row` as they finish an attack (passed or not: the figures of a failing
attack are the interesting ones); the conftest prints :func:`table` in pytest's terminal
summary, which is what ``scripts/hostile.sh`` shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.hostile.procinfo import Usage
from tests.hostile.tally import CRASH, PROBLEMS, REFUSED, REJECTED, UNTYPED, Tally


@dataclass
class Row:
    attack: str
    process: str
    before: Usage
    peak: Usage
    after: Usage | None
    """None if the process died."""
    tally: Tally = field(default_factory=Tally)
    through_s: float | None = None
    """How long a normal client's round took during the attack (None: it failed)."""
    note: str = ""


ROWS: list[Row] = []
_OTHER_PROBLEMS = tuple(kind for kind in PROBLEMS if kind not in (UNTYPED, CRASH))
"""Dropped connections, timeouts, serializers and strangers let in, members rejected."""


def record(row: Row) -> Row:
    ROWS.append(row)
    return row


def _refusals(t: Tally) -> str:
    parts = {
        **t.by_detail(REFUSED),
        **{f"rejected {k}": n for k, n in t.by_detail(REJECTED).items()},
    }
    return ", ".join(f"{k} {n}" for k, n in sorted(parts.items(), key=lambda kv: -kv[1])) or "-"


def _usage(u: Usage | None) -> str:
    return "dead" if u is None else f"{u.rss_mib:.0f} MiB/{u.threads}"


def table(rows: list[Row]) -> list[str]:
    """Lines of a fixed-width table: calls, refusals by type, problems, usage, timing."""
    header = (
        f"{'attack':<40} {'process':<10} {'calls':>6} {'untyped':>7} {'other':>5} {'crash':>5} "
        f"{'before RSS/thr':>15} {'peak':>15} {'after':>15} {'client s':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        t = r.tally
        other = sum(t.count(kind) for kind in _OTHER_PROBLEMS)
        crashed = t.count(CRASH) + (1 if r.after is None else 0)
        through = "fail" if r.through_s is None else f"{r.through_s:.2f}"
        lines.append(
            f"{r.attack[:40]:<40} {r.process[:10]:<10} {t.calls:>6} {t.count(UNTYPED):>7} "
            f"{other:>5} {crashed:>5} {_usage(r.before):>15} {_usage(r.peak):>15} "
            f"{_usage(r.after):>15} {through:>8}"
        )
        lines.append(f"    refusals: {_refusals(t)}" + (f"; {r.note}" if r.note else ""))
    lines.append("-" * len(header))
    lines.append(_totals(rows))
    return lines


def _totals(rows: list[Row]) -> str:
    total = Tally()
    for r in rows:
        total.merge(r.tally)
    crashed = total.count(CRASH) + sum(1 for r in rows if r.after is None)
    slowest = max((r.through_s for r in rows if r.through_s is not None), default=0.0)
    kept_out = sum(1 for r in rows if r.through_s is None)
    return (
        f"total: {total.calls} calls, {total.count(UNTYPED)} untyped errors, {crashed} crashes, "
        f"{sum(total.count(k) for k in _OTHER_PROBLEMS)} other problems; slowest normal "
        f"client {slowest:.2f} s, kept out {kept_out} times"
    )
