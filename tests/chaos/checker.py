"""Pure checker of one chaos run against README "Guarantees, stated exactly".

It takes plain data (published ids, subscriber record lines, the nemesis' fault log and
the broker's "declared dead" events) and does no I/O, so every rule is unit-tested on
small synthetic histories (tests/chaos/test_checker.py) before it judges a real run.

A duplicate of id X (X recorded more than once) is explained only when, between one
record of X and the next, the process holding it died hard (``sub-kill``: SIGKILL, or
``crash-after``: it exited by itself with 137) or the broker declared its subscriber dead;
or when the later record is a *zombie's*: its subscriber had been declared dead while it
held X (frozen, say) and finished X once it ran again (within ``ZOMBIE_WINDOW_S`` of the
declaration, or of the end of the freeze that caused it). One death explains at most
``prefetch`` duplicates. A graceful SIGTERM explains nothing.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from subscriber.faults import CRASH_EXIT_CODE
from tests.chaos.nemesis import TAKEOVER

CLOCK_TOLERANCE_S = 0.05
"""Records, signals and log lines are stamped by different processes' clock reads."""
LOG_LAG_S = 0.25
"""Declared-dead times are arrival stamps of broker log lines, taken after the broker
decided (and possibly after another subscriber already got the events)."""
DECLARED = "declared-dead"
ZOMBIE_WINDOW_S = 2.0
RECONTACT_S = 2.0
"""A subscriber's heartbeat: how long after a broker restart it may take to send the acks
the dead broker never stored (README Guarantees: a subscriber that dies before its acks
arrive leaves every event it processed since to be delivered again)."""
"""How long after it runs again a subscriber declared dead may still finish what it held."""


@dataclass(frozen=True)
class Cause:
    """Something that may explain duplicates: a hard death or a declared death."""

    kind: str
    subscriber: str
    pid: int | None
    """The process that died; None for a declared death (the broker names members)."""
    at: float

    def __str__(self) -> str:
        who = self.subscriber if self.pid is None else f"{self.subscriber} (pid {self.pid})"
        return f"{self.kind} of {who} at {self.at:.3f}"


@dataclass(frozen=True)
class OrderViolation:
    """``later`` was first processed right after ``earlier`` but has a smaller seq."""

    publisher_id: str
    partition: int
    earlier: str
    later: str


@dataclass
class Duplicate:
    id: str
    deliveries: list[tuple[str, int, float]]
    """(subscriber, pid, at) of every record of the id, in ``at`` order."""
    explanation: str | None
    why_not: str = ""


@dataclass
class Totals:
    events: int
    records: int
    duplicates: int
    faults: dict[str, int]


@dataclass
class Report:
    lost: list[str]
    unexpected: list[str]
    order_violations: list[OrderViolation]
    duplicates: list[Duplicate]
    totals: Totals
    inactive_alive: list[str] = field(default_factory=list)
    """Filled by the harness: subscribers running but still inactive after the stream."""
    errors: list[str] = field(default_factory=list)
    """Filled by the harness: the run itself went wrong (a publisher failed, ...)."""

    @property
    def unexplained(self) -> list[Duplicate]:
        return [d for d in self.duplicates if d.explanation is None]

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.order_violations
            or self.unexplained
            or self.inactive_alive
            or self.errors
        )

    def summary(self, examples: int = 5) -> str:
        """A few lines a failure message can carry: the figures, then example problems."""
        t = self.totals
        faults = " ".join(f"{k}={v}" for k, v in sorted(t.faults.items())) or "none"
        lines = [
            f"events={t.events} records={t.records} duplicates={t.duplicates} "
            f"(unexplained {len(self.unexplained)}) lost={len(self.lost)} "
            f"unexpected={len(self.unexpected)} reordered={len(self.order_violations)} "
            f"inactive_alive={self.inactive_alive} faults: {faults}"
        ]
        lines += [f"error: {e}" for e in self.errors]
        if self.lost:
            lines.append(f"lost: {self.lost[:examples]}")
        if self.unexpected:
            lines.append(f"unexpected: {self.unexpected[:examples]}")
        lines += [f"order: {v}" for v in self.order_violations[:examples]]
        lines += [
            f"unexplained: {d.id} {d.deliveries} {d.why_not}" for d in self.unexplained[:examples]
        ]
        return "\n".join(lines)


STALE_PUSH = re.compile(r"refused a push: session (\d+) is older than")


def refused_again(lines: Iterable[str]) -> list[str]:
    """Sessions whose pushes one subscriber refused as older than one it saw, more than
    once. A dead broker's late push is refused once; the same session refused again is a
    live broker retrying its pushes in a session older than the subscriber's (a new life
    of the channel that gave out older sessions): its work would never reach it."""
    refused = Counter(m.group(1) for line in lines if (m := STALE_PUSH.search(line)))
    return sorted(session for session, times in refused.items() if times > 1)


def declared_dead_events(
    stamped_lines: Iterable[tuple[float, str]], channel: str
) -> list[tuple[float, str]]:
    """(arrival time, member id) of every "marked inactive" broker line of ``channel``.

    Knows the current two wordings (a failed push; unacknowledged events) and the newer
    broker's ``<channel>: <member> marked inactive (<reason>)``."""
    ch = re.escape(channel)
    patterns = (
        re.compile(rf"(?:^|\s){ch}: push of \d+ events to (\S+) failed: .*member marked inactive"),
        re.compile(rf"(?:^|\s){ch}: (\S+) left \d+ of \d+ events unacknowledged.*marked inactive"),
        re.compile(rf"(?:^|\s){ch}: (\S+) marked inactive \("),
    )
    found = []
    for at, line in stamped_lines:
        for pattern in patterns:
            if match := pattern.search(line):
                found.append((at, match.group(1)))
                break
    return found


def causes_of(
    faults: Iterable[Mapping[str, Any]], declared: Iterable[tuple[float, str]]
) -> list[Cause]:
    """The hard deaths in the fault log and the declared deaths, in time order.

    A ``sub-kill`` died when the signal was sent (``start``); a ``crash-after`` process
    when its exit with 137 was seen (``end``); a ``sub-takeover``'s old process when it
    froze (``start``: another process took its id over meanwhile). Other kinds explain
    nothing."""
    causes = [Cause(DECLARED, sub, None, at) for at, sub in declared]
    for f in faults:
        if f["kind"] == "sub-kill":
            causes.append(Cause("sub-kill", f["target"], f["pid"], f["start"]))
        elif f["kind"] == "crash-after" and f.get("exit_code") == CRASH_EXIT_CODE:
            causes.append(Cause("crash-after", f["target"], f["pid"], f["end"]))
        elif f["kind"] == TAKEOVER:  # its session ended as it froze
            causes.append(Cause(TAKEOVER, f["target"], f["pid"], f["start"]))
    return sorted(causes, key=lambda c: c.at)


def seq_of(event_id: str) -> int | None:
    _, _, tail = event_id.rpartition("-")
    return int(tail) if tail.isdigit() else None


def order_violations(firsts: Iterable[Mapping[str, Any]]) -> list[OrderViolation]:
    """Per (publisher, partition), the first records in ``at`` order must have strictly
    increasing seqs; each adjacent pair that does not is one violation."""
    streams: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for r in firsts:
        if seq_of(r["id"]) is not None:
            streams[(r["publisher_id"], r["partition"])].append(r)
    found = []
    for (pub, partition), recs in sorted(streams.items(), key=lambda kv: str(kv[0])):
        recs.sort(key=lambda r: r["at"])
        for a, b in itertools.pairwise(recs):
            if seq_of(b["id"]) <= seq_of(a["id"]):
                found.append(OrderViolation(pub, partition, a["id"], b["id"]))
    return found


def explain_duplicates(
    by_id: Mapping[str, list[Mapping[str, Any]]],
    causes: list[Cause],
    prefetch: int,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    log_lag_s: float = LOG_LAG_S,
    stops: Iterable[Mapping[str, Any]] = (),
    outages: Iterable[tuple[float, float]] = (),
) -> list[Duplicate]:
    """Explain each extra record of an id by the earliest cause that hit the previous
    record's process between the two records; then no cause may explain more than
    ``prefetch`` extra records: those processed longest before it are the excess. A death
    during a broker outage (``outages``: (killed, restarted)), before the subscriber could
    send its acks again, explains every event it processed before the broker died: their
    acks died with the broker, or never reached one."""
    stops = list(stops)
    outages = list(outages)
    charged: dict[Cause, list[tuple[float, str]]] = defaultdict(list)
    missing: dict[str, list[str]] = defaultdict(list)
    dup_ids = sorted((i for i, recs in by_id.items() if len(recs) > 1), key=_id_key)
    for event_id in dup_ids:
        recs = by_id[event_id]
        for r, nxt in itertools.pairwise(recs):
            cause = _first_cause(r, nxt, causes, tolerance_s, log_lag_s)
            cause = cause or _zombie_cause(r, nxt, causes, stops, tolerance_s, log_lag_s)
            if cause is None:
                missing[event_id].append(
                    f"no death of {r['subscriber']} (pid {r['pid']}) between "
                    f"{r['at']:.3f} and {nxt['at']:.3f}" + _zombie_hint(nxt, causes)
                )
            else:
                charged[cause].append((r["at"], event_id))
    reasons: dict[str, list[str]] = defaultdict(list)
    for cause, pairs in charged.items():
        pairs.sort()
        unacked = [p for p in pairs if _acks_lost(p[0], cause, outages, tolerance_s)]
        for _, event_id in unacked:
            reasons[event_id].append(f"{cause} during a broker outage")
        pairs = [p for p in pairs if p not in unacked]
        excess = len(pairs) - prefetch
        for n, (_, event_id) in enumerate(pairs):
            if n < excess:
                missing[event_id].append(f"beyond the prefetch ({prefetch}) charged to {cause}")
            else:
                reasons[event_id].append(str(cause))
    return [
        Duplicate(
            event_id,
            [(r["subscriber"], r["pid"], r["at"]) for r in by_id[event_id]],
            None if missing[event_id] else "; ".join(reasons[event_id]),
            "; ".join(missing[event_id]),
        )
        for event_id in dup_ids
    ]


def _acks_lost(
    processed_at: float, cause: Cause, outages: list[tuple[float, float]], tolerance_s: float
) -> bool:
    """Whether the event was processed before a broker died and its subscriber died before
    it could send its acks to the restarted broker."""
    return any(
        processed_at <= killed + tolerance_s and killed <= cause.at <= back + RECONTACT_S
        for killed, back in outages
    )


def _first_cause(
    r: Mapping[str, Any],
    nxt: Mapping[str, Any],
    causes: list[Cause],
    tolerance_s: float,
    log_lag_s: float,
) -> Cause | None:
    for c in causes:
        if c.subscriber != r["subscriber"] or (c.pid is not None and c.pid != r["pid"]):
            continue
        lag = log_lag_s if c.kind == DECLARED else 0.0
        if r["at"] - tolerance_s <= c.at <= nxt["at"] + tolerance_s + lag:
            return c
    return None


def _zombie_cause(
    r: Mapping[str, Any],
    nxt: Mapping[str, Any],
    causes: list[Cause],
    stops: list[Mapping[str, Any]],
    tolerance_s: float,
    log_lag_s: float,
) -> Cause | None:
    """The declaration of death that makes ``nxt`` a zombie's record, if any: its
    subscriber was declared dead after it was given the event (the earlier record ``r``,
    by whoever took the event over, came after the declaration) and before ``nxt``, and
    ``nxt`` came soon after that subscriber ran again (the end of a freeze of its process
    that the declaration fell in, or the declaration itself)."""
    for c in causes:
        if c.kind not in (DECLARED, TAKEOVER) or c.subscriber != nxt["subscriber"]:
            continue
        if c.kind == TAKEOVER and c.pid != nxt["pid"]:
            continue  # (only the old process is a zombie)
        slack = tolerance_s + log_lag_s
        if not r["at"] + slack >= c.at <= nxt["at"] + slack:
            continue
        ran_again = c.at
        for stop in stops:
            same = stop["target"] == c.subscriber and stop["pid"] == nxt["pid"]
            if same and stop["start"] - tolerance_s <= c.at <= stop["end"] + log_lag_s:
                ran_again = max(ran_again, stop["end"])
        if nxt["at"] <= ran_again + ZOMBIE_WINDOW_S:
            return c
    return None


def _zombie_hint(nxt: Mapping[str, Any], causes: list[Cause]) -> str:
    """A hint when the later record's subscriber had been declared dead before it: it may
    have handled a push that had already timed out (a zombie, e.g. after a SIGSTOP)."""
    dead = [
        c.at
        for c in causes
        if c.kind == DECLARED and c.subscriber == nxt["subscriber"] and c.at < nxt["at"]
    ]
    if not dead:
        return ""
    return f" ({nxt['subscriber']} had been declared dead at {max(dead):.3f} before it)"


def _id_key(event_id: str) -> tuple[str, int]:
    return (event_id.rpartition("-")[0], seq_of(event_id) or 0)


def check(
    published: Mapping[str, Iterable[str]],
    records: Iterable[Mapping[str, Any]],
    faults: Iterable[Mapping[str, Any]],
    declared_dead: Iterable[tuple[float, str]],
    prefetch: int,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    log_lag_s: float = LOG_LAG_S,
) -> Report:
    """Judge one run: lost, unexpected, reordered and unexplained-duplicate events."""
    faults = list(faults)
    wanted = {i for ids in published.values() for i in ids}
    by_id: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    count = 0
    for r in records:
        by_id[r["id"]].append(r)
        count += 1
    for recs in by_id.values():
        recs.sort(key=lambda r: r["at"])
    causes = causes_of(faults, declared_dead)
    stops = [f for f in faults if f["kind"] in ("sub-stop", TAKEOVER)]
    outages = [(f["start"], f["end"]) for f in faults if f["kind"] == "broker-kill"]
    duplicates = explain_duplicates(by_id, causes, prefetch, tolerance_s, log_lag_s, stops, outages)
    fired = Counter(f["kind"] for f in faults if f.get("fired", True))
    return Report(
        lost=sorted(wanted - by_id.keys(), key=_id_key),
        unexpected=sorted(by_id.keys() - wanted, key=_id_key),
        order_violations=order_violations(recs[0] for recs in by_id.values()),
        duplicates=duplicates,
        totals=Totals(len(wanted), count, len(duplicates), dict(fired)),
    )
