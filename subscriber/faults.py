"""Fault toggles of a subscriber (DESIGN §8), off unless asked for; each logs when it fires.

``delay:P:S`` / ``long-delay:P:S``  with probability P per event, take S more seconds to
                   take a push in (a slow delivery: what the broker's delay rules judge)
``slow:P:S``       with probability P, the handler takes S more seconds (a long job)
``crash-after:N``  hard exit (``os._exit``, like SIGKILL) when the N-th event reaches the
                   handler, before it runs, so N-1 events were processed
``drop-acks:P``    with probability P, process an event but leave it out of the reply
``fail-on:ID``     the handler fails on event ID every time (a poison event)
``crash-on:ID``    hard exit (``os._exit``) whenever event ID reaches the handler (a poison
                   event that kills its process: the broker dead-letters it after
                   ``--max-crashes`` deaths with it alone)
``fail-first:P``   with probability P, the handler fails on an event's first delivery (a
                   transient failure: its retry succeeds, behind it the rest of its
                   partition waits)
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
CRASH_EXIT_CODE = 137
"""What a shell reports for a SIGKILLed process; crash-after uses it too."""
KINDS = (
    "delay",
    "long-delay",
    "slow",
    "crash-after",
    "drop-acks",
    "fail-on",
    "crash-on",
    "fail-first",
)
TIMED = ("delay", "long-delay", "slow")
PROBABLE = ("drop-acks", "fail-first")
AROUND_EVENTS = frozenset(("slow", "crash-after", "drop-acks", "fail-on", "crash-on", "fail-first"))
"""The kinds that act as an event is handled (the others act as a push arrives)."""


class InjectedFailure(Exception):
    """Raised instead of running the handler on a ``fail-on`` or ``fail-first`` event."""


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    probability: float = 1.0
    seconds: float = 0.0
    count: int = 0
    event_id: str = ""

    def __str__(self) -> str:
        if self.kind in TIMED:
            return f"{self.kind}:{self.probability:g}:{self.seconds:g}"
        if self.kind == "crash-after":
            return f"crash-after:{self.count}"
        if self.kind in PROBABLE:
            return f"{self.kind}:{self.probability:g}"
        return f"{self.kind}:{self.event_id}"


def parse_fault(text: str) -> FaultSpec:
    """Parse one ``--fault`` value; ValueError says what is wrong in one line."""
    kind, _, rest = text.partition(":")
    args = rest.split(":") if rest else []
    if kind in TIMED:
        _arity(text, args, 2)
        return FaultSpec(kind, _probability(args[0]), seconds=_non_negative(args[1]))
    if kind == "crash-after":
        _arity(text, args, 1)
        count = int(_non_negative(args[0]))
        if count < 1 or str(count) != args[0]:
            raise ValueError(f"crash-after needs a whole number of events >= 1, got {args[0]!r}")
        return FaultSpec(kind, count=count)
    if kind in PROBABLE:
        _arity(text, args, 1)
        return FaultSpec(kind, _probability(args[0]))
    if kind in ("fail-on", "crash-on"):
        if not rest:
            raise ValueError(f"{kind} needs an event id: {kind}:ID")
        return FaultSpec(kind, event_id=rest)
    raise ValueError(f"unknown fault {kind!r}; one of {', '.join(KINDS)}")


def _arity(text: str, args: list[str], n: int) -> None:
    if len(args) != n:
        raise ValueError(f"{text!r}: expected {n} value(s) after the fault name")


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"must be a finite number >= 0, got {text!r}")
    return value


def _probability(text: str) -> float:
    value = _non_negative(text)
    if value > 1:
        raise ValueError(f"a probability is between 0 and 1, got {text!r}")
    return value


class Faults:
    """The toggles of one subscriber, applied around each event."""

    def __init__(
        self,
        specs: list[FaultSpec],
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        hard_exit: Callable[[int], Any] = os._exit,
    ) -> None:
        self.specs = specs
        self.around_events = any(spec.kind in AROUND_EVENTS for spec in specs)
        """Whether ``before``, ``check_poison`` or ``drop_ack`` can do anything: the
        worker skips the three calls per event when none can (the usual subscriber)."""
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._exit = hard_exit
        self.received = 0

    def on_arrival(self, events: list[dict[str, Any]]) -> None:
        """Called when a push arrives, before it is answered: delivery delays."""
        for event in events:
            for spec in self.specs:
                if spec.kind in ("delay", "long-delay") and self._fires(spec):
                    self._nap(spec, event)

    def before(self, event: dict[str, Any]) -> None:
        """Called when an event reaches the handler, before it runs: crashes, long jobs."""
        self.received += 1
        for spec in self.specs:
            crash_on = spec.kind == "crash-on" and event["id"] == spec.event_id
            if crash_on or (spec.kind == "crash-after" and self.received >= spec.count):
                log.warning("fault %s fired on %s: exiting now", spec, event["id"])
                logging.shutdown()
                self._exit(CRASH_EXIT_CODE)
            if spec.kind == "slow" and self._fires(spec):
                self._nap(spec, event)

    def _nap(self, spec: FaultSpec, event: dict[str, Any]) -> None:
        log.warning("fault %s fired on %s: sleeping %g s", spec, event["id"], spec.seconds)
        self._sleep(spec.seconds)

    def check_poison(self, event: dict[str, Any]) -> None:
        """Raise InjectedFailure for a ``fail-on`` event, or a ``fail-first`` one on its
        first delivery (instead of its handler)."""
        for spec in self.specs:
            poison = spec.kind == "fail-on" and event["id"] == spec.event_id
            first = spec.kind == "fail-first" and event["attempt"] == 1 and self._fires(spec)
            if poison or first:
                log.warning("fault %s fired on %s: handler fails", spec, event["id"])
                raise InjectedFailure(f"injected failure on {event['id']}")

    def drop_ack(self, event: dict[str, Any]) -> bool:
        """Whether to leave this processed event out of the reply."""
        for spec in self.specs:
            if spec.kind == "drop-acks" and self._fires(spec):
                log.warning("fault %s fired: ack of %s dropped", spec, event["id"])
                return True
        return False

    def _fires(self, spec: FaultSpec) -> bool:
        return self._rng.random() < spec.probability
