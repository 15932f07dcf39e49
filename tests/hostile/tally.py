"""What hostile calls got back, counted: successes, typed refusals, and everything else.

The service's contract at the RPC boundary is narrow: a call either succeeds or is refused
with one of the typed errors of ``channel_server.errors`` (arriving as itself); a client
that is not let in (a stranger, a serializer other than msgpack) has its connection
rejected with a reason. Anything else is a problem: an untyped error (``TypeError``,
Pyro5's own errors), a connection dropped without an answer, no answer at all, or a server
that died.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import Pyro5.errors

from channel_server import errors

OK = "ok"
REFUSED = "refused"
"""A typed error of channel_server.errors, as itself."""
REJECTED = "rejected"
"""The connection was refused at the handshake, with a reason."""
UNTYPED = "untyped"
DROPPED = "dropped"
"""The server closed the connection instead of answering."""
TIMEOUT = "timeout"
CRASH = "crash"
ACCEPTED_SERIALIZER = "accepted-serializer"
"""A connection speaking another serializer than msgpack was let in."""
ADMITTED_STRANGER = "admitted-stranger"
"""A caller without a valid credential was let in."""
REJECTED_MEMBER = "rejected-member"
"""A caller with a valid credential, speaking msgpack, was not let in."""
SENT = "sent"
"""A request sent without waiting for an answer (a flood): counted, not judged."""
UNSENDABLE = "unsendable"
"""The serializer could not even encode the call (a client-side limit, not a call)."""
PROBLEMS = (
    UNTYPED,
    DROPPED,
    TIMEOUT,
    CRASH,
    ACCEPTED_SERIALIZER,
    ADMITTED_STRANGER,
    REJECTED_MEMBER,
)
EXAMPLE_CHARS = 300


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str = ""
    """The error class of a refusal or untyped error, or what a rejection was about."""
    message: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.detail}" if self.detail else self.kind


NAME_SERVER_ERRORS = (Pyro5.errors.NamingError,)
"""The name server's protocol answers an unknown or taken name with NamingError, and
Pyro5's clients (``locate_ns``, ``PYRONAME:`` proxies, this project's lookups) rely on
exactly that class: it counts as typed."""


def typed_error(exc: BaseException) -> bool:
    """One of the service's error classes, crossed the wire as itself."""
    return type(exc) in errors.ALL_ERRORS or type(exc) in NAME_SERVER_ERRORS


def of_exception(exc: BaseException) -> Outcome:
    """A remote exception the server answered with."""
    kind = REFUSED if typed_error(exc) else UNTYPED
    name = type(exc).__name__ if kind == REFUSED else f"{type(exc).__module__}.{type(exc).__name__}"
    return Outcome(kind, name, one_line(str(exc)))


def of_rejection(reason: str) -> Outcome:
    """A connection refused at the handshake: NotAuthorized, or about the serializer. The
    reason is kept whole (it must be one line)."""
    about = "NotAuthorized" if "not authorized" in reason else "other"
    return Outcome(REJECTED, about, reason.strip())


def one_line(text: str) -> str:
    line = " ".join(text.split())
    return line[:EXAMPLE_CHARS]


class Tally:
    """Outcomes by label and by method, with the first example of every problem kind.
    Any thread may add to it (``_lock``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.methods: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        """First call per distinct problem (kind, detail, site): what to reproduce."""
        self.problem_counts: Counter[str] = Counter()
        self.bytes_sent = 0
        self.reconnects = 0
        """Connections opened again because the daemon hung up after an error reply."""

    def add(self, site: str, outcome: Outcome, call_text: str = "", size: int = 0) -> None:
        """Count one call to ``site`` (``Class.method``) and what it got."""
        with self._lock:
            self.outcomes[outcome.label] += 1
            if outcome.kind == UNSENDABLE:
                return
            self.methods[site] += 1
            self.bytes_sent += size
            if outcome.kind not in PROBLEMS:
                return
            key = f"{outcome.label} in {site}"
            self.problem_counts[key] += 1
            if key not in self.examples:
                self.examples[key] = f"{call_text[:EXAMPLE_CHARS]} -> {outcome.message}"

    def merge(self, other: Tally) -> None:
        with self._lock:
            self.outcomes.update(other.outcomes)
            self.methods.update(other.methods)
            self.bytes_sent += other.bytes_sent
            self.reconnects += other.reconnects
            self.problem_counts.update(other.problem_counts)
            for key, text in other.examples.items():
                self.examples.setdefault(key, text)

    @property
    def calls(self) -> int:
        """Calls that reached a server (unsendable ones never left the client)."""
        return sum(n for label, n in self.outcomes.items() if not label.startswith(UNSENDABLE))

    def count(self, kind: str) -> int:
        return sum(n for label, n in self.outcomes.items() if label.split(":")[0] == kind)

    def by_detail(self, kind: str) -> dict[str, int]:
        prefix = kind + ":"
        return {
            label[len(prefix) :]: n
            for label, n in self.outcomes.items()
            if label.startswith(prefix)
        }

    def problems(self) -> list[str]:
        """Every distinct problem seen, how often, and the first call that met it; empty
        when all is well."""
        return [
            f"{key} (x{self.problem_counts[key]}): {self.examples[key]}"
            for key in sorted(self.examples)
        ]
