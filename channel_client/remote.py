"""A channel reached by name, with client-side retries (DESIGN §12).

Each call is tried up to ``attempts`` times, ``pause_s`` apart, finding the channel again
through the name server between tries (the broker may have restarted elsewhere; a channel
that is unknown once this client reached it, or right after a lost connection, is one
whose broker is still restoring it).
When it stays away the caller gets BrokerUnavailable saying so in one line. Retrying is safe:
publishing is deduplicated by event id and ``get`` is idempotent for the same last id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import Pyro5.client
import Pyro5.errors

from channel_client.lookup import resolve_channel
from channel_client.reply_spin import CALLER_SPIN_S, spin_for_replies
from channel_server.errors import BrokerUnavailable, InvalidArgument, StoreError, UnknownChannel
from channel_server.wire import as_refusal, check_name, closed_by_peer, make_proxy

log = logging.getLogger(__name__)
DEFAULT_ATTEMPTS = 5
DEFAULT_PAUSE_S = 0.5
DEFAULT_TIMEOUT_S = 10.0
RETRY_SLACK_S = 1.0
"""Added to a call's retry window (attempts x pause) before it stops new attempts: calls
that fail at once make all their attempts, whatever their pauses add up to."""
POLL_FIRST_S = 0.02
POLL_MAX_S = 0.5
DROPPABLE = frozenset({"publish", "get"})
"""Calls whose replies the drop-reply fault may drop (the ones whose retry it shows)."""


@dataclass(frozen=True)
class ClientOptions:
    """How a classic client (put / get / scripts) reaches its channels."""

    ns_host: str
    ns_port: int
    attempts: int = DEFAULT_ATTEMPTS
    timeout_s: float = DEFAULT_TIMEOUT_S
    drop_replies: int = 0
    reply_spin_s: float = CALLER_SPIN_S
    """The longest the caller's own calls wait for a quick reply awake, where that pays
    (:mod:`~channel_client.reply_spin`; 0: never). Threads whose waits overlap other work
    make their connections with no spin, whatever this says."""

    def __post_init__(self) -> None:
        """Each value checked as the client is made: a negative timeout or a port given
        as text was taken and failed later, far from the mistake (session 34's newcomer)."""
        if not (isinstance(self.reply_spin_s, int | float) and 0 <= self.reply_spin_s < 1):
            raise InvalidArgument("reply_spin_s", "must be a number of seconds in [0, 1)")
        if not (_is_number(self.timeout_s) and self.timeout_s > 0):
            raise InvalidArgument(
                "timeout_s", f"must be a number of seconds > 0, got {self.timeout_s!r}"
            )
        if not (type(self.ns_port) is int and 0 < self.ns_port < 65536):
            raise InvalidArgument(
                "ns_port", f"must be a port number (an int), got {self.ns_port!r}"
            )
        if not (type(self.attempts) is int and self.attempts >= 1):
            raise InvalidArgument("attempts", f"must be a whole number >= 1, got {self.attempts!r}")

    @classmethod
    def from_args(cls, args: Any) -> ClientOptions:
        """From the flags of cli_common.add_ns_flags and add_client_flags."""
        return cls(args.ns_host, args.ns_port, args.attempts, args.timeout, args.drop_replies)


NOT_THE_OWNER = "the calling thread is not the owner of this proxy"
"""How Pyro5 says a proxy was used by a thread other than its owner."""
OTHER_THREAD = (
    "this client belongs to the thread that first used it (a connection is one thread's): "
    "make one per thread (a Publisher's submit() may be called from any thread)"
)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def polling(timeout_s: float) -> Iterator[float]:
    """Drive a client-side wait for something only the channel can tell (work done, a
    channel created): yields at once, then after pauses that double from POLL_FIRST_S to
    POLL_MAX_S (quick answers for short waits, few calls for long ones), and stops once
    ``timeout_s`` has passed, after a last look at the deadline. Yields the seconds left."""
    deadline = time.monotonic() + timeout_s
    pause = POLL_FIRST_S
    while True:
        left = deadline - time.monotonic()
        yield max(0.0, left)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(pause, left))  # client-side pause between two looks
        pause = min(pause * 2, POLL_MAX_S)


class LostReply(Exception):
    """A reply dropped on purpose (the drop-reply fault): the call is retried."""


TOO_LARGE = "message too large"
"""What Pyro5 says of a message over its size limit (before sending it)."""


def _unsendable(exc: Exception) -> InvalidArgument | None:
    """The refusal a call's own arguments earned (Pyro5 could not serialize them, or they
    exceed the message size), if that is what failed: not the network, so not retried."""
    if isinstance(exc, Pyro5.errors.SerializeError):
        return InvalidArgument("message", f"cannot be sent: {exc}")
    if isinstance(exc, Pyro5.errors.ProtocolError) and TOO_LARGE in str(exc):
        return InvalidArgument("message", f"{exc}: send fewer or smaller events at a time")
    return None


class RemoteChannel:
    """Calls on one channel's RPC object; owned by one thread (its proxy is)."""

    def __init__(
        self,
        options: ClientOptions,
        channel: str,
        *,
        create: bool = False,
        kind: str = "queue",
        id_scope: str | None = None,
        pause_s: float = DEFAULT_PAUSE_S,
        awake: bool = False,
    ) -> None:
        """``options``: the name server and the tries, each ``options.timeout_s`` long;
        ``create``, ``kind``, ``id_scope``: see :func:`~channel_client.lookup.resolve_channel`;
        ``awake``: the caller has nothing else to do while it waits, so its replies may be
        waited for awake, up to ``options.reply_spin_s`` (:mod:`~channel_client.reply_spin`)."""
        self.channel = check_name("channel", channel)
        self._ns = (options.ns_host, options.ns_port)
        self._create, self._kind, self._id_scope = create, kind, id_scope
        self._timeout_s = options.timeout_s
        self._attempts = max(1, options.attempts)
        self._pause_s = pause_s
        self._drop_replies = options.drop_replies
        self._spin_s = options.reply_spin_s if awake else 0.0
        self._proxy: Pyro5.client.Proxy | None = None
        self.retries = 0
        self._reached = False
        """A call went through once: an unknown channel from now on is its broker
        restarting (its names gone, the new one's not yet there), retried, not a
        mistake."""

    def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` remotely; errors of the service itself are raised at once, but
        a StoreError is tried again like an unreachable broker (a database restarting:
        a call that failed on the store changed nothing, and every call here may be
        repeated), and raised as itself when it lasts."""
        last: Exception | None = None
        retry_until = float("inf")  # set at the first failure: the retries' time is bounded
        for attempt in range(1, self._attempts + 1):
            try:
                proxy = self._connect()
                result = getattr(proxy, method)(*args)
                spin_for_replies(proxy, self._spin_s)
                self._maybe_drop(method)
                if attempt > 1:
                    log.info(
                        "%s on %s went through after %d retries", method, self.channel, attempt - 1
                    )
                self._reached = True
                return result
            except (
                Pyro5.errors.CommunicationError,
                BrokerUnavailable,
                LostReply,
                UnknownChannel,
                StoreError,
            ) as exc:
                if isinstance(exc, UnknownChannel) and last is None and not self._reached:
                    raise  # unknown from the start; once reached, its broker is restarting
                if unsendable := _unsendable(exc):
                    raise unsendable from None  # no retry makes it sendable
                if refusal := as_refusal(exc):
                    self.release()
                    raise refusal from None
                last = exc
                self.release()
                if attempt == 1:  # (slack: quick failures make every attempt)
                    retry_until = time.monotonic() + self._retry_window_s + RETRY_SLACK_S
                elif time.monotonic() >= retry_until:
                    break  # attempts that each wait out a timeout: the window is what counts
                if attempt < self._attempts:
                    self.retries += 1
                    self._log_retry(method, exc, attempt)
                    time.sleep(self._pause_s)  # client-side back-off between attempts
            except Pyro5.errors.PyroError as exc:
                if NOT_THE_OWNER in str(exc):
                    raise InvalidArgument("thread", OTHER_THREAD) from None
                raise
        if isinstance(last, StoreError):
            raise last
        tries = "1 attempt" if attempt == 1 else f"{attempt} attempts"
        raise BrokerUnavailable(f"channel {self.channel}", f"no answer after {tries} ({last})")

    def claim(self) -> None:
        """Make the calling thread the owner of the proxy (made by another thread that
        will not use it again)."""
        if self._proxy is not None:
            self._proxy._pyroClaimOwnership()

    @property
    def _retry_window_s(self) -> float:
        """How long after a first failure new attempts may start: ``attempts`` that fail
        at once take that long; attempts that wait out their timeouts (a link that holds
        calls unanswered) stop when it is over, not after ``attempts`` of them (session
        36's network probe: --retry-for 5 took 135 s)."""
        return (self._attempts - 1) * self._pause_s

    def _log_retry(self, method: str, exc: Exception, attempt: int) -> None:
        """One warning when a call starts failing, not one per attempt."""
        if attempt == 1:
            retry_for_s = self._retry_window_s
            log.warning(
                "%s on %s failed (%s); retrying for up to %.0f s",
                method,
                self.channel,
                exc,
                retry_for_s,
            )
        else:
            log.debug(
                "%s on %s: retry %d of %d (%s)",
                method,
                self.channel,
                attempt,
                self._attempts - 1,
                exc,
            )

    def _connect(self) -> Pyro5.client.Proxy:
        if self._proxy is not None and closed_by_peer(self._proxy):
            self.release()  # the broker closed it as idle: open a new one
        if self._proxy is None:
            uri = resolve_channel(*self._ns, self.channel, self._create, self._kind, self._id_scope)
            self._proxy = make_proxy(uri, self._timeout_s)
        return self._proxy

    def _maybe_drop(self, method: str) -> None:
        if self._drop_replies > 0 and method in DROPPABLE:
            self._drop_replies -= 1
            log.warning("fault drop-reply fired: the reply to %s was dropped", method)
            raise LostReply(f"reply to {method} dropped")

    def release(self) -> None:
        """Close the connection (from any thread: the one that used it is done)."""
        if self._proxy is not None:
            self._proxy._pyroClaimOwnership()
            self._proxy._pyroRelease()
            self._proxy = None

    def __enter__(self) -> RemoteChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
