"""The push subscriber's conversation with its channel, on one thread that owns the proxy.

It subscribes, sends the handlers' outcomes back as acks (on disk in the processed-ID
window first), says it is alive every ``heartbeat_s`` and learns its standing: a member the
channel declared dead (a freeze, a long GC pause) subscribes again by itself, and one the
broker restored in a new session adopts it. When the channel cannot be reached (a broker
restarting) it keeps the outcomes and retries, finding the channel again through the name
server, and says so once when contact is lost and once when it is back.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import Pyro5.errors

from channel_client.remote import ClientOptions, RemoteChannel
from channel_server.errors import BrokerUnavailable, ChannelError, NotAuthorized, UnknownChannel
from subscriber.inbox import AckMessage, Inbox, Outbox
from subscriber.processed import ProcessedIds

log = logging.getLogger("subscriber")
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 2.0
DEFAULT_HEARTBEAT_S = 2.0
FREEZE_SLACK_S = 1.0
"""A wait that returns this much later than asked means the process was frozen (SIGSTOP,
a long GC pause, a paused VM): the channel may have declared it dead meanwhile."""
RECENT_IDS = 1000
"""Ids processed last that are acknowledged again after contact with the channel was lost
and before leaving: acks that a broker crash kept from being written then still count."""
STANDING_GAP_S = 0.2
"""The least time between a call and a standing check asked for after it."""
FENCE_SHARE = 0.5
"""Of the channel's ack timeout, how long a confirmation of our standing lasts: the
channel declares a member dead only after a push or ping to it went unanswered that long
(some slack for a push sent before our confirmation arrived, and for clock rates)."""
HELD_CHECK_S = 0.05
"""While a handler runs, the control thread looks this often for events its chunk finished
before it, so their acks wait for no long job (a wake every 50 ms, only while one runs)."""
UNREACHABLE = (BrokerUnavailable, UnknownChannel, Pyro5.errors.CommunicationError)
"""Errors that mean "the channel is away for now" once it has been reached."""


@dataclass(frozen=True)
class Identity:
    """Who subscribes, where it is reached, and the channel it asks for."""

    ns_host: str
    ns_port: int
    channel: str
    subscriber_id: str
    callback: str
    callback_secret: str
    group: str | None
    prefetch: int | None
    timeout_s: float
    connect_timeout_s: float


class ChannelSession:
    """Runs on the control thread (``run``); other threads only call ``finish``."""

    def __init__(
        self,
        who: Identity,
        inbox: Inbox,
        outbox: Outbox,
        processed: ProcessedIds,
        stuck_s: Callable[[], float],
        holding: Callable[[int], int],
        release_held: Callable[[], None] = lambda: None,
    ) -> None:
        """``stuck_s``: how long the handler in hand has run; ``holding(session)``: events
        of a session not yet handled and acknowledged (told with each heartbeat);
        ``release_held``: hands over what the chunk finished before a long handler."""
        self._who = who
        self._inbox = inbox
        self._outbox = outbox
        self._processed = processed
        self._stuck_s = stuck_s
        self._holding = holding
        self._release_held = release_held
        self._remote: RemoteChannel | None = None
        self.group = who.group
        self.session: int | None = None
        self.info: dict[str, Any] = {}
        self.trusted = threading.Event()
        """Clear while the process may have been frozen and its standing is unchecked:
        the worker starts no new event then (the channel may have moved them on)."""
        self.ready = threading.Event()
        """Set once the first subscribe answered (``info``) or failed (``error``)."""
        self.error: BaseException | None = None
        self._heartbeat_s = DEFAULT_HEARTBEAT_S
        self._fence_s = float("inf")
        """How long a confirmation of our standing lasts (half the channel's ack timeout;
        none from a channel that does not say it)."""
        self._confirmed_at = float("-inf")
        """When the latest call whose answer confirmed our standing was sent (this
        process's monotonic clock)."""
        self.handler_timeout_s = float("inf")
        """The channel's handler timeout: how long a stop waits for the handler in hand."""
        self._finishing = threading.Event()
        self._unsubscribe_at_end = True
        self._away_since: float | None = None
        self._last_contact = time.monotonic()
        self._check_standing = False
        self._recent_due = False
        self._last_drop: str | None = None
        """Why the channel last dropped us, while rejoining fails (logged once)."""

    # -- the control thread --------------------------------------------------------------
    def run(self) -> None:
        who = self._who
        options = ClientOptions(who.ns_host, who.ns_port, attempts=1, timeout_s=who.timeout_s)
        self._remote = RemoteChannel(options, who.channel)
        try:
            if self._first_subscribe():
                self._serve()
        finally:
            self._remote.release()

    def finish(self, unsubscribe: bool) -> None:
        """Send what is left, unsubscribe (if asked) and end (called by ``stop``, after
        the worker has stopped)."""
        self._unsubscribe_at_end = unsubscribe
        self._finishing.set()
        self._outbox.interrupt()

    def _serve(self) -> None:
        while not self._finishing.is_set():
            wait_s = max(0.0, self._until_heartbeat())
            if self._check_standing:  # asked for: soon
                wait_s = min(
                    wait_s, max(0.0, self._last_contact + STANDING_GAP_S - time.monotonic())
                )
            if self._stuck_s() > 0:  # a handler runs: what finished before it goes on
                self._release_held()
                wait_s = min(wait_s, HELD_CHECK_S)
            due = time.monotonic() + wait_s + FREEZE_SLACK_S
            outcomes = self._outbox.wait(wait_s)
            if time.monotonic() > due:
                log.warning("this process was frozen for a while: checking its standing")
                self.trusted.clear()
            if not self.trusted.is_set():  # (or another thread saw a freeze)
                self._check_standing = True
            if outcomes:
                self._send(outcomes)
            elif self._standing_due() or self._until_heartbeat() <= 0:
                self._heartbeat()
            if self._recent_due:
                self._recent_due = False
                self._ack_recent()
        while outcomes := self._outbox.drain():  # ACK_BATCH_MAX at a time
            self._send(outcomes)
        if self._unsubscribe_at_end:  # (of this session: one that took the id over stays)
            self._ack_recent()
            self._call("unsubscribe", self._who.subscriber_id, self.group, self.session)

    def distrust(self) -> None:
        """Start no new event until the channel confirms this subscriber's standing (the
        control thread asks at once): another thread saw that the process may have been
        frozen, and its events may be another member's by now."""
        self.trusted.clear()
        self._outbox.interrupt()

    def _ack_recent(self) -> None:
        """Acknowledge the events processed last once more (by uid). A broker that crashed
        before writing their acks restored those events and keeps them for this subscriber
        (its partitions are pinned): they are done now, not handed to another member."""
        if recent := self._processed.recent(RECENT_IDS):
            self._processed.flush()
            who = self._who
            self._call("ack", who.subscriber_id, self.group, self.session or 0, 0, recent, {})

    def _until_heartbeat(self) -> float:
        """Every ``heartbeat_s`` without a call, or half the fence if that is shorter: a
        confirmation of our standing (a call answered) then comes before the last one runs
        out, so that a worker rarely has to wait for one."""
        return self._last_contact + min(self._heartbeat_s, self._fence_s / 2) - time.monotonic()

    def _standing_due(self) -> bool:
        """A standing check was asked for (a freeze, a worker whose confirmation ran out),
        and the last call is STANDING_GAP_S old: one refused, or answered by a call
        sent too long ago, is not asked again in a tight loop."""
        return self._check_standing and time.monotonic() - self._last_contact >= STANDING_GAP_S

    def fresh(self) -> bool:
        """Whether a call sent less than the fence ago confirmed our standing, so the
        channel cannot have declared us dead and handed our events on yet: it does so only
        after its ack timeout without an answer, counted from after that call arrived.
        A push read on a link slower than that is stale by then, whether or not its
        caller's closing could be seen (session 36's network probe: a push delayed 3 s
        against --ack-timeout 1 ran after its events had gone to another subscriber).
        The worker starts no event while it is not: it asks first (``distrust``)."""
        return time.monotonic() - self._confirmed_at < self._fence_s

    def _confirmed(self, sent_at: float) -> None:
        self._confirmed_at = max(self._confirmed_at, sent_at)

    # -- subscribing ---------------------------------------------------------------------
    def _first_subscribe(self) -> bool:
        """Subscribe, waiting up to ``connect_timeout_s`` for an unreachable broker. A
        channel the name server does not know is an error at once (a wrong name)."""
        deadline = time.monotonic() + self._who.connect_timeout_s
        for attempt in itertools.count():
            try:
                self._subscribe()
                return True
            except (BrokerUnavailable, Pyro5.errors.CommunicationError) as exc:
                if time.monotonic() >= deadline or self._finishing.is_set():
                    self.error = self._gave_up(exc)
                    break
                if attempt == 0:
                    log.warning(
                        "channel %s not reachable yet (%s); waiting", self._who.channel, exc
                    )
                self._finishing.wait(RETRY_FIRST_S)
            except BaseException as exc:  # handed to start(), which raises it
                self.error = exc
                break
        self.ready.set()
        return False

    def _gave_up(self, exc: Exception) -> BrokerUnavailable:
        """Why ``start`` failed, once ``connect_timeout_s`` went by without a broker."""
        who = self._who
        return BrokerUnavailable(
            f"channel {who.channel}",
            f"no broker answered in {who.connect_timeout_s:g} s ({exc}); is one running with "
            f"the name server at {who.ns_host}:{who.ns_port}? (python -m channel_server serve)",
        )

    def _channel(self) -> RemoteChannel:
        """The channel's remote, made by ``run`` before any call."""
        if self._remote is None:
            raise RuntimeError("the session's channel is not connected yet")
        return self._remote

    def _subscribe(self) -> None:
        who = self._who
        sent_at = time.monotonic()
        info = self._channel().call(
            "subscribe",
            who.subscriber_id,
            who.callback,
            who.group,
            who.prefetch,
            who.callback_secret,
        )
        self.info, self.group, self.session = info, info["group"], info["session"]
        self._heartbeat_s = info.get("heartbeat_s", DEFAULT_HEARTBEAT_S)
        self.handler_timeout_s = info.get("handler_timeout_s", float("inf"))
        ack_timeout_s = info.get("ack_timeout_s")  # (a channel before session 36: none)
        if isinstance(ack_timeout_s, int | float) and ack_timeout_s > 0:
            self._fence_s = ack_timeout_s * FENCE_SHARE
        self._confirmed_at = sent_at  # a new session: the older ones' confirmations end
        self._inbox.adopt(self.session)
        self._contact()
        self.trusted.set()
        self.ready.set()

    # -- acks and heartbeats -------------------------------------------------------------
    def _send(self, messages: list[AckMessage]) -> None:
        if not messages:
            return
        self._processed.flush()  # on disk before the channel forgets these events
        for message in messages:
            who = self._who
            args: list[Any] = [who.subscriber_id, self.group, message.session]
            args += [message.through_seq, message.acked, message.nacked]
            if message.from_seq is not None or message.returned:  # (from_seq: a channel
                args.append(message.from_seq or 0)  # that takes acks in push replies)
            if message.returned:
                args.append(message.returned)
            sent_at = time.monotonic()
            reply = self._call("ack", *args)
            if (
                reply is not None
                and reply.get("status") == "ok"
                and message.session == self.session
            ):
                self._confirmed(sent_at)
            if reply is not None and reply.get("status") != "ok":
                log.info("acks of %d events of an ended session dropped", message.size)
                self._check_standing = True

    def _heartbeat(self) -> None:
        self._check_standing = False
        session = self.session or 0
        holding = self._holding(session)
        sent_at = time.monotonic()
        reply = self._call("heartbeat", self._who.subscriber_id, self.group, session, holding)
        if reply is None:
            return
        status = reply.get("status")
        if status == "active":  # still ours: confirmed
            self._confirmed(sent_at)
        if status == "moved" and reply.get("callback") == self._who.callback:
            log.info("the channel resumed this subscriber in session %s", reply["session"])
            self.session = reply["session"]
            self._confirmed_at = sent_at
            self._inbox.adopt(self.session)
        elif status in ("moved", "inactive", "unknown") and not self._rejoin(status, reply):
            self._inbox.end(session)  # the channel handed its events on: none is ours now
        self.trusted.set()

    def _rejoin(self, status: str, reply: dict[str, Any]) -> bool:
        """Subscribe again after the channel dropped this subscriber; False when it could
        not (yet): tried again at the next heartbeat."""
        stuck = self._stuck_s()
        if stuck > self.handler_timeout_s:
            log.error(
                "dropped by the channel (%s), but a handler has run %.0f s: not subscribing "
                "again until it returns",
                status,
                stuck,
            )
            return False
        why = reply.get("reason") or {"moved": "its id is used from elsewhere"}.get(status, status)
        first = why != self._last_drop
        if first:
            log.warning(
                "the channel dropped subscriber %s (%s); subscribing again",
                self._who.subscriber_id,
                why,
            )
        self._last_drop = why
        try:
            self._subscribe()
        except NotAuthorized:
            raise  # (see _call)
        except (ChannelError, *UNREACHABLE) as exc:
            if first:
                log.warning("subscribing again failed: %s (retried at each heartbeat)", exc)
            return False
        self._last_drop = None
        return True

    # -- calls ---------------------------------------------------------------------------
    def _call(self, method: str, *args: Any) -> Any:
        """Call the channel, retrying while it is unreachable. None when given up: only
        while finishing, after ``connect_timeout_s`` (the events come back to others)."""
        pause = RETRY_FIRST_S
        while True:
            try:
                result = self._channel().call(method, *args)
            except UNREACHABLE as exc:
                self._lost(exc)
                if self._finishing.is_set() and self._away_for() > self._who.connect_timeout_s:
                    log.warning("giving up on %s: the channel stays away", method)
                    return None
                threading.Event().wait(pause)  # back-off while the channel is away
                pause = min(pause * 2, RETRY_MAX_S)
                continue
            except NotAuthorized:
                if self._finishing.is_set():
                    return None
                raise  # the user was removed, or lost the grant: the subscriber stops
            except ChannelError as exc:
                log.error("%s refused by the channel: %s", method, exc)
                self._contact()  # it answered: the next heartbeat waits its interval
                return None
            self._contact()
            return result

    def _lost(self, exc: BaseException) -> None:
        if self._away_since is None:
            self._away_since = time.monotonic()
            log.warning("lost contact with channel %s (%s); retrying", self._who.channel, exc)

    def _away_for(self) -> float:
        return 0.0 if self._away_since is None else time.monotonic() - self._away_since

    def _contact(self) -> None:
        if self._away_since is not None:
            log.warning(
                "channel %s reachable again after %.1f s", self._who.channel, self._away_for()
            )
            self._away_since = None
            self._check_standing = True
            self._recent_due = True
        self._last_contact = time.monotonic()
