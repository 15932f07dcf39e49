"""After an attack: is the process alive, did it stay within its bounds, does a normal
client still get through? Each check gives a line per failure, so one test reports every
way an attack hurt (the to-do list), not only the first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.hostile.procinfo import MIB, Sampler, usage
from tests.hostile.report import Row, record
from tests.hostile.tally import Tally
from tests.integration.procs import Proc


@dataclass(frozen=True)
class Bound:
    """How much an attack may grow a process, at its peak during the attack over its size
    before: threads and resident memory (a spike is a way to kill it too); ``why`` says
    where the numbers come from."""

    threads: int
    rss_mib: float
    why: str


def timed(client_round: Callable[[], float]) -> tuple[float | None, str]:
    """A normal client's round: (seconds, "") or (None, what went wrong)."""
    try:
        return client_round(), ""
    except Exception as exc:  # any failure of the round is the finding
        return None, f"{type(exc).__name__}: {exc}"


def record_attack(
    attack: str,
    proc: Proc,
    sampler: Sampler,
    through_s: float | None,
    results: Tally | None = None,
    note: str = "",
) -> Row:
    """The figures of an attack that just ended (``through_s``: its normal client's
    round), added to the report."""
    after = usage(proc.popen.pid) if proc.alive else None
    results = results or Tally()
    return record(
        Row(attack, proc.name, sampler.before, sampler.peak, after, results, through_s, note)
    )


def close_row(
    attack: str,
    proc: Proc,
    sampler: Sampler,
    results: Tally,
    client_round: Callable[[], float],
    note: str = "",
) -> tuple[Row, str]:
    """Record an attack with a normal client's round right after it. Returns the row and
    what went wrong with the round ("" if nothing)."""
    through, error = timed(client_round) if proc.alive else (None, "the process died")
    return record_attack(attack, proc, sampler, through, results, note), error


def failures(row: Row, bound: Bound, round_error: str = "") -> list[str]:
    """Every way the attack hurt: death, threads or memory past the bound, a normal
    client kept out."""
    out = []
    if row.after is None:
        return [f"{row.process} died during {row.attack}"]
    extra_threads = row.peak.threads - row.before.threads
    if extra_threads > bound.threads:
        out.append(
            f"{row.process} threads: {row.before.threads} -> peak {row.peak.threads} "
            f"(+{extra_threads}, bound +{bound.threads}: {bound.why})"
        )
    extra_rss = (row.peak.rss - row.before.rss) / MIB
    if extra_rss > bound.rss_mib:
        out.append(
            f"{row.process} RSS: {row.before.rss_mib:.0f} -> peak {row.peak.rss_mib:.0f} MiB, "
            f"{row.after.rss_mib:.0f} after (+{extra_rss:.0f}, bound +{bound.rss_mib:.0f}: "
            f"{bound.why})"
        )
    if row.through_s is None:
        out.append(f"a normal client did not get through after {row.attack}: {round_error}")
    return out
