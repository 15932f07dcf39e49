"""Push subscriber: its own Pyro5 daemon takes batches in; handlers run on a worker thread.

Delivery and completion are apart: a push is answered once its events are queued and,
at most the wait the channel offers (``answer_s``, a few ms), its handlers are done (the
channel judges that round trip); the worker runs the handler on each event in delivery
order, and the acks go in the push's reply when the worker finished within the wait, else
the control thread (:mod:`subscriber.control`) sends them. So a handler may take minutes
without looking dead, and a frozen process is still told from a slow job (it stops
answering pings).

Threads, all owned here: the daemon's request loop (its workers call ``deliver`` and
``ping``), the worker, and the control thread. ``start`` starts them, ``stop`` ends them in
order: the worker finishes the event in hand, the control thread sends what is left and
unsubscribes (so the rest of the work moves at once), then the daemon closes.
"""

from __future__ import annotations

import inspect
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import Pyro5.api
import Pyro5.errors
import Pyro5.server

from channel_client.lookup import resolve_channel
from channel_client.remote import polling
from channel_client.runtime import join_in_slices
from channel_server.daemon_loop import DaemonLoop
from channel_server.errors import (
    BrokerUnavailable,
    ChannelError,
    InvalidArgument,
    NotAuthorized,
    UnknownChannel,
)
from channel_server.events import event_uid
from channel_server.guard import GuardedDaemon, secret_gate
from channel_server.strict_calls import checked_arity
from channel_server.transport import bind_failure
from channel_server.wire import (
    DEFAULT_HOST,
    DEFAULT_NS_PORT,
    caller_gave_up,
    check_name,
    register_errors,
)
from subscriber.control import ChannelSession, Identity
from subscriber.faults import Faults
from subscriber.inbox import ACK_LINGER_S, Inbox, Item, Outbox, Outcome, StaleSession
from subscriber.processed import DEFAULT_WINDOW, ProcessedIds, window_path
from subscriber.record import Recorder

log = logging.getLogger(__name__)
Handler = Callable[[dict[str, Any]], None]
"""Called once per event dict, in order per partition, on the subscriber's worker thread:
``id``, ``publisher_id``, ``partition``, ``timestamp`` and ``payload`` as published,
``offset`` (the channel's sequence number of the event) and ``attempt`` (1, then 2, 3 ...
when it is delivered again). Returning acknowledges the event; raising nacks that event
(it is retried, and dead-lettered after the channel's max attempts), and the events after
it in its partition wait for it: they are delivered again after its retry, so a partition
is processed in order."""
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
WORKER_IDLE_WAIT_S = 5.0
"""The longest the worker sleeps with nothing pushed: a push or a stop wakes it (each
wake of an idle process costs about 0.2 ms of CPU here: 256 subscribers waking twice a
second took a tenth of a CPU)."""
FREEZE_GAP_S = 0.75
"""No thread of the process ran for longer than this while it held events: it may have
been frozen (SIGSTOP, a paused VM, a machine too busy to run it) long enough for the
channel to hand its events on, which it does only after a ping or a push went unanswered
for its ping timeout (1 s). A handler longer than this costs one check of our standing."""
TRUST_WAIT_S = 0.5
"""How often a worker waiting for its standing looks at the stop flag."""
CALLBACK_SECRET_BYTES = 32
"""The subscriber's callback daemon admits only whoever presents this random secret: the
broker it gave it to when it subscribed (so nobody else can push it forged events)."""
HANDLER_WAIT_MAX_S = 24 * 3600.0
LONG_HANDLER_S = 1.0
"""A stop that waits for a handler running longer than this says so as a warning (shown
without any logging set up), so a Ctrl-C is not met by silence."""


@checked_arity
class _Receiver:
    """The callback object the channel pushes to."""

    def __init__(self, subscriber: Subscriber) -> None:
        self._subscriber = subscriber

    @Pyro5.api.expose
    def deliver(self, delivery: dict[str, Any]) -> dict[str, Any]:
        """A push in the plain form (a broker older than this subscriber)."""
        return self._subscriber._take_in(delivery)

    @Pyro5.api.expose
    def deliver_packed(self, delivery: dict[str, Any]) -> dict[str, Any]:
        """A push whose events came as one msgpack byte string (``Batch.to_wire_packed``)."""
        return self._subscriber._take_in(_unpacked(delivery))

    @Pyro5.api.expose
    def ping(self) -> str:
        self._subscriber._read_request("a ping")
        return self._subscriber.subscriber_id


class Subscriber:
    """Subscribes to a channel and runs ``handler`` on each pushed event, in order."""

    def __init__(
        self,
        channel: str,
        subscriber_id: str,
        handler: Handler,
        *,
        group: str | None = None,
        prefetch: int | None = None,
        ns_host: str = DEFAULT_HOST,
        ns_port: int = DEFAULT_NS_PORT,
        host: str = DEFAULT_HOST,
        port: int = 0,
        recorder: Recorder | None = None,
        faults: Faults | None = None,
        processed: ProcessedIds | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        create: bool = False,
        wait_for_channel_s: float = 0.0,
    ) -> None:
        """``group``: the consumer group to compete in (None: ``default`` on a queue);
        ``prefetch``: the most events held unacknowledged (None: the channel's default);
        ``host``/``port``: where its own callback daemon listens; ``connect_timeout_s``:
        how long ``start`` waits for a broker that does not answer yet; ``create``: host
        the channel (a queue) if nobody does yet, as ``Publisher(create=True)`` does;
        ``wait_for_channel_s``: how long ``start`` waits for a channel that does not exist
        yet (someone else creates it) before it raises UnknownChannel (0: at once);
        ``state_dir``: keep the processed-ID window in a file there, so a restarted
        subscriber acknowledges what it processed before without running the handler again
        (None: in memory, for this run). ``recorder``, ``faults`` and ``processed`` are the
        CLI's (record file, fault toggles, a processed-ID window of its own)."""
        self.channel = check_name("channel", channel)
        self.subscriber_id = check_name("subscriber_id", subscriber_id)
        self.group = None if group is None else check_name("group", group)
        """None: the channel's choice (``default`` on a queue, an own group on a topic)."""
        self.prefetch = prefetch
        if not callable(handler):  # else every event it is given goes to the DLQ
            raise InvalidArgument("handler", f"must be callable, got {type(handler).__name__}")
        if _runs_later(handler):  # else every event is acknowledged and none processed
            raise InvalidArgument(
                "handler",
                "must do its work when called: an async def or generator function only "
                "makes an object that does it later (wrap it: lambda ev: asyncio.run(f(ev)))",
            )
        self._handler = handler
        self._ns = (ns_host, ns_port)
        self._bind = (host, port)
        self._recorder = recorder
        self._faults = faults or Faults([])
        if processed is None and state_dir is not None:
            where = window_path(Path(state_dir), self.channel, self.group, self.subscriber_id)
            processed = ProcessedIds(DEFAULT_WINDOW, where)  # a malformed one: StoreError
        self._processed = processed if processed is not None else ProcessedIds()
        self._timeouts = (timeout_s, connect_timeout_s)
        self._create = create
        self._wait_for_channel_s = wait_for_channel_s
        self._stopping = threading.Event()
        self._inbox = Inbox()
        self._outbox = Outbox()
        self._busy_since: float | None = None
        """When the handler in hand started (monotonic), None when idle."""
        self._working = False
        """The worker has events taken from the inbox in hand (not yet in the outbox)."""
        self._chunk: list[Outcome] = []
        """Outcomes of the chunk in hand not handed over yet: the worker appends to it;
        the control thread takes those a long handler holds back (:meth:`_release_held`)."""
        self._chunk_taken = 0
        """How many of ``_chunk`` the control thread took."""
        self._stop_lock = threading.Lock()
        """Serializes stops: a handler's runs on a thread of its own (:meth:`_stop_later`)
        while the owner's ``with`` may stop it too."""
        self._chunk_lock = threading.Lock()
        """Guards handing ``_chunk`` over (replacing it, ``_chunk_taken``), by either
        thread, and the outbox adds that go with it."""
        self._ran_at = time.monotonic()
        """When a thread of this process last noted that it ran (see :meth:`_ran`)."""
        self._serving: DaemonLoop | None = None
        self._threads: dict[str, threading.Thread] = {}
        self._session: ChannelSession | None = None
        self.uri = ""
        self.processed = 0
        self.failure: BaseException | None = None
        """Why the subscriber stopped by itself: a thread of its own failed (None: it did
        not). A handler's exceptions are not this: they nack their event."""

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        """Find (or create) the channel, serve the callback, then subscribe. Returns the
        channel's answer; raises what the first subscribe raised (UnknownChannel,
        BrokerUnavailable, SubscriberIdInUse ...), with no thread left running.
        InvalidArgument if it is running already (``with Subscriber(...)`` starts it)."""
        if self._serving is not None and not self._stopping.is_set():
            raise InvalidArgument(
                "subscriber", f"{self.subscriber_id} is started already (stop it first)"
            )
        register_errors()
        if self._create or self._wait_for_channel_s > 0:
            self._find_channel()
        secret = secrets.token_urlsafe(CALLBACK_SECRET_BYTES)
        gate = secret_gate(secret, f"subscriber {self.subscriber_id}")
        try:
            daemon = GuardedDaemon(gate, host=self._bind[0], port=self._bind[1])
        except OSError as exc:  # a port in use, an address not of this machine
            where = bind_failure(exc, "callback", *self._bind)
            raise InvalidArgument("port" if self._bind[1] else "host", str(where)) from None
        self._serving = DaemonLoop(daemon, f"subscriber-{self.subscriber_id}-loop")
        self.uri = str(daemon.register(_Receiver(self), f"subscriber.{self.subscriber_id}"))
        who = Identity(
            *self._ns,
            self.channel,
            self.subscriber_id,
            self.uri,
            secret,
            self.group,
            self.prefetch,
            *self._timeouts,
        )
        self._session = ChannelSession(
            who,
            self._inbox,
            self._outbox,
            self._processed,
            self._stuck_s,
            self._holding,
            self._release_held,
        )
        self._serving.start()
        self._spawn("worker", self._work)
        self._spawn("control", self._session.run)
        if not self._session.ready.wait(self._timeouts[1] + self._timeouts[0]):
            self.stop(unsubscribe=False)
            raise TimeoutError(f"subscribing to {self.channel} did not finish")
        if self._session.error is not None:
            self.stop(unsubscribe=False)
            raise self._session.error
        self.group = self._session.group
        return self._session.info

    def __enter__(self) -> Subscriber:
        """``with Subscriber(...) as sub:`` starts it, and stops it (gracefully) at the end."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _find_channel(self) -> None:
        """Make sure the channel exists before serving anything: create it (``create``),
        or wait up to ``wait_for_channel_s`` for someone else to; a broker or name server
        that does not answer yet is waited for as long as ``connect_timeout_s`` (or the
        channel wait, if longer). Raises UnknownChannel or BrokerUnavailable then."""
        started = time.monotonic()
        said: set[type[Exception]] = set()
        last: Exception | None = None
        for _ in polling(max(self._wait_for_channel_s, self._timeouts[1])):
            try:
                resolve_channel(*self._ns, self.channel, create=self._create)
                return
            except UnknownChannel:
                if time.monotonic() - started >= self._wait_for_channel_s:
                    raise UnknownChannel(self.channel) from None
                last = UnknownChannel(self.channel)
            except (BrokerUnavailable, Pyro5.errors.CommunicationError) as exc:
                last = exc
            if type(last) not in said:  # once per reason, not once per look
                said.add(type(last))
                log.warning("waiting for channel %s: %s", self.channel, last)
        if isinstance(last, ChannelError):
            raise last
        raise BrokerUnavailable(f"channel {self.channel}", f"not reachable ({last})") from None

    def _spawn(self, role: str, target: Callable[[], Any]) -> None:
        thread = threading.Thread(
            target=self._vital,
            args=(role, target),
            name=f"subscriber-{self.subscriber_id}-{role}",
            daemon=True,
        )
        self._threads[role] = thread
        thread.start()

    def _vital(self, role: str, target: Callable[[], Any]) -> None:
        """Run a thread of ours; one that fails stops the subscriber (:meth:`_fail`)."""
        try:
            target()
        except BaseException as exc:
            self._fail(role, exc)

    def _fail(self, role: str, exc: BaseException) -> None:
        """A thread of ours died of ``exc``: rather than half a subscriber (pushes taken in
        that nobody handles, or handled and never acknowledged), stop, so the channel
        hands our events on now and not after its handler timeout. With the worker gone,
        the control thread sends what was done and unsubscribes; with the control thread
        gone, the callback daemon closes, and the channel finds us gone at its next ping.
        ``failure`` says why; ``stop`` still ends the rest."""
        log.critical(
            "subscriber %s stops: its %s thread failed: %s: %s",
            self.subscriber_id,
            role,
            type(exc).__name__,
            exc,
            exc_info=None if isinstance(exc, NotAuthorized) else exc,
        )
        self.failure = exc
        self._stopping.set()
        self._inbox.close()
        if role == "worker" and self._session is not None:
            self._hand_over(urgent=True)  # what its chunk finished before it failed
            self._session.finish(unsubscribe=True)
        elif self._serving is not None:
            self._serving.stop(STOP_TIMEOUT_S)

    def stop(self, unsubscribe: bool = True) -> None:
        """Graceful stop: finish the event in hand, send the acks of what was done,
        unsubscribe so the rest moves at once, then close the daemon. Called from its own
        handler, it returns at once and the subscriber stops once that handler returns."""
        if threading.current_thread() in self._threads.values():
            self._stop_later(unsubscribe)
            return
        with self._stop_lock:
            self._stop(unsubscribe)

    def _stop(self, unsubscribe: bool) -> None:
        self._stopping.set()
        self._inbox.close()
        if self._busy_since is not None:
            ran = self._stuck_s()
            log.log(
                logging.WARNING if ran >= LONG_HANDLER_S else logging.INFO,
                "stopping: finishing the event in hand first (its handler has run %.0f s)",
                ran,
            )
        self._join("worker", self._session.handler_timeout_s if self._session else None)
        if self._session is not None:
            self._session.finish(unsubscribe)
            self._join("control")
            if self._threads["control"].is_alive():
                log.warning(
                    "the channel did not answer within %.0f s: left without its goodbye "
                    "(what was not acknowledged is delivered again, to this subscriber id "
                    "or another)",
                    STOP_TIMEOUT_S,
                )
        if self._serving is not None:
            self._serving.stop(STOP_TIMEOUT_S)
        if self._recorder is not None:
            self._recorder.close()
        self._processed.close()

    def _stop_later(self, unsubscribe: bool) -> None:
        """A stop asked from one of the subscriber's own threads (a handler), which the
        stop waits for: on a thread of its own, which ends with the stop. The thread
        could not wait for itself, so the stop failed before unsubscribing and the
        channel kept pushing the rest to a member that declined it, with another idle
        (session 34's newcomer)."""
        self._stopping.set()
        self._inbox.close()
        stopper = threading.Thread(
            target=self.stop,
            args=(unsubscribe,),
            name=f"subscriber-{self.subscriber_id}-stop",
            daemon=True,
        )
        stopper.start()

    def _join(self, role: str, timeout_s: float | None = None) -> None:
        """Wait for a thread to end: ``timeout_s`` (or STOP_TIMEOUT_S) at most."""
        thread = self._threads.get(role)
        if thread is not None and thread.is_alive():
            wait_s = max(STOP_TIMEOUT_S, min(timeout_s or 0.0, HANDLER_WAIT_MAX_S))
            join_in_slices(thread, wait_s)  # a second Ctrl-C still quits at once

    def why_failed(self) -> str | None:
        """What :attr:`failure` says, as one line (None while it has not failed)."""
        exc = self.failure
        return None if exc is None else f"the subscriber stopped: {type(exc).__name__}: {exc}"

    def _holding(self, session: int) -> int:
        """Events of ``session`` still to handle or acknowledge (the chunk in the worker's
        hands counts as one at least)."""
        working = 1 if self._working else 0
        return self._inbox.count(session) + self._outbox.count(session) + working

    def _stuck_s(self) -> float:
        started = self._busy_since
        return 0.0 if started is None else time.monotonic() - started

    # -- taking pushes in ----------------------------------------------------------------
    def _take_in(self, delivery: dict[str, Any]) -> dict[str, Any]:
        """A push: queue its events for the worker; the reply says how many, and carries
        their acks when the worker finished them within the wait the push offered."""
        session, seq, events = _parse_delivery(delivery)
        if self._stopping.is_set():  # it will acknowledge what it did and unsubscribe
            return {"queued": 0, "leaving": True}
        if self._read_request("a push"):  # its events may be another member's by now
            raise InvalidArgument("session", "the push was read after the channel gave up")
        self._faults.on_arrival(events)
        try:
            reply: dict[str, Any] = {"queued": self._inbox.put(session, seq, events)}
        except StaleSession as exc:  # a late push of a broker that died: nobody's events
            log.warning("refused a push: %s", exc)
            raise InvalidArgument("session", str(exc)) from None
        offered = delivery.get("answer_s")
        if isinstance(offered, float) and offered > 0 and events:
            done = self._outbox.answer(session, seq + len(events) - 1, offered)
            if done is not None:
                self._processed.flush()  # on disk before the channel forgets these events
                if caller_gave_up():  # it timed out while this push was taken in
                    log.warning(
                        "a push was answered after the channel gave up: its acks "
                        "go on our own connection"
                    )
                    self._outbox.unanswered(done)
                else:
                    reply["acks"] = done.as_answer()
        return reply

    def _read_request(self, request: str) -> bool:
        """A push or ping was read: True when the channel had stopped waiting for its
        answer (a freeze kept it unread): the channel may have declared this subscriber
        dead, so no new event starts until it confirms our standing. Either way a thread
        of this process ran (:meth:`_ran`; events are held when the inbox holds some or
        the worker has a chunk in hand)."""
        gave_up = caller_gave_up()
        if gave_up:
            log.warning(
                "%s was read after the channel gave up on it: checking our standing", request
            )
            if self._session is not None:
                self._session.distrust()
        self._ran(holding=self._working or not self._inbox.empty())
        return gave_up

    # -- the worker ----------------------------------------------------------------------
    def _work(self) -> None:
        """Handle what was pushed, in order, a chunk (all that waits) at a time."""
        while not self._stopping.is_set():
            if items := self._inbox.take_all(WORKER_IDLE_WAIT_S):
                self._working = True
                self._handle(items)
                self._working = False

    def _handle(self, items: list[Item]) -> None:
        """Run the handler on a chunk of events and hand their outcomes to the control
        thread in groups (at once when a job was long, else at the chunk's end), each
        group's processed ids in the window first. The window is asked once per chunk
        (only this thread adds to it; ``handled`` holds what the chunk added). Once an
        event fails, the rest of its partition in the chunk is given back unhandled
        (``failed``): the channel delivers them again after it, so they never overtake
        it. (A partition's next push waits for this one's outcomes: one chunk holds all
        of a partition that this subscriber has.)"""
        uids = [event_uid(item.event["publisher_id"], item.event["id"]) for item in items]
        known = self._processed.known(uids)
        handled: set[str] = set()
        failed: set[tuple[int, str, Any]] = set()
        done = self._chunk  # (appended here; a long handler's are taken by _release_held)
        inbox = self._inbox
        now = first_at = time.monotonic()  # one clock reading per event: its end, the next's start
        for item, uid in zip(items, uids, strict=True):
            if not self._trusted_now():
                if not self._wait_trusted():
                    break
                now = time.monotonic()  # it waited for its standing
            if not inbox.current(item.session):
                continue  # its session ended: the channel gave it to another member
            if failed and _partition_of(item) in failed:
                outcome: Outcome | None = Outcome(item.session, item.seq, uid, returned=True)
            else:
                outcome = self._process(item, uid, uid in known or uid in handled, now)
            if outcome is None:
                continue
            if outcome.error is not None:
                failed.add(_partition_of(item))
            elif not outcome.returned:
                handled.add(uid)
            if not done:
                first_at = now
            done.append(outcome)
            now = time.monotonic()
            if now - first_at >= ACK_LINGER_S:
                self._hand_over(urgent=True)
                done = self._chunk
        if done:
            self._hand_over(urgent=inbox.empty())

    def _hand_over(self, urgent: bool) -> None:
        """The chunk's outcomes not handed over yet, to the control thread; a new chunk
        list starts."""
        with self._chunk_lock:
            fresh = self._chunk[self._chunk_taken :]
            self._chunk, self._chunk_taken = [], 0
            self._send_on(fresh, urgent)

    def _release_held(self) -> None:
        """For the control thread, while a handler has run over ACK_LINGER_S: hand over
        the outcomes of the events its chunk finished before it. They waited for it to end
        (session 33's Jepsen probe: an instant event's ack held 20 s behind the next job,
        its partition stalled, and a crash meanwhile ran it again elsewhere)."""
        started = self._busy_since
        if started is None or time.monotonic() - started < ACK_LINGER_S:
            return
        with self._chunk_lock:
            chunk = self._chunk
            end = len(chunk)  # (the worker may append meanwhile: those stay its own)
            fresh = chunk[self._chunk_taken : end]
            self._chunk_taken = end
            self._send_on(fresh, urgent=True)

    def _send_on(self, outcomes: list[Outcome], urgent: bool) -> None:
        """Outcomes to the outbox, the processed ids in the window first (under
        ``_chunk_lock``: the order the outbox gets them in is the order they were done)."""
        if outcomes:
            self._processed.add([o.uid for o in outcomes if o.error is None and not o.returned])
            self._outbox.add(outcomes, urgent=urgent)

    def _trusted_now(self) -> bool:
        """Trusted, our standing confirmed lately (ChannelSession.fresh) and not stopping,
        without waiting (nearly always: it is asked before each event; else
        :meth:`_wait_trusted`)."""
        self._ran(holding=True)
        session = self._session
        if session is None:
            return not self._stopping.is_set()
        if not session.fresh():
            session.distrust()  # no word lately: the control thread asks at once
        return session.trusted.is_set() and not self._stopping.is_set()

    def _ran(self, holding: bool) -> None:
        """A thread of this process runs now: the worker before each event, a push or ping
        as it is read. A gap of over FREEZE_GAP_S since one last did, while events were
        held, may be a freeze (or one long handler): then no new event starts before the
        channel confirms our standing. Checked before the time is noted, and read before
        the flag, so whichever thread runs first after a freeze, the worker sees it."""
        now = time.monotonic()
        if holding and now - self._ran_at > FREEZE_GAP_S and self._session is not None:
            log.debug("no thread ran for %.2f s: checking our standing", now - self._ran_at)
            self._session.distrust()
        self._ran_at = now

    def _wait_trusted(self) -> bool:
        """Before starting an event: wait while the control thread checks our standing
        after a freeze (False when stopping). The flag is read before it is waited on:
        it is set nearly always, and a wait takes its lock."""
        while not self._stopping.is_set():
            session = self._session
            if session is None:
                return True
            if session.trusted.is_set() or session.trusted.wait(TRUST_WAIT_S):
                if session.fresh():
                    return True
                session.distrust()  # confirmed, but by a call sent too long ago
        return False

    def _process(self, item: Item, uid: str, seen: bool, started: float) -> Outcome | None:
        """Run the handler once on an event; None when stopping intervened before it ran.
        An event processed before (``seen``: its ack was lost, or the broker restarted) is
        acknowledged without running the handler again: the processed-ID window and the
        acks name events by uid, so two publishers' events with one id are two events.
        ``started``: the clock as the previous event ended (what ``_stuck_s`` counts from)."""
        event = item.event
        faults = self._faults if self._faults.around_events else None  # (none: no calls)
        if seen:
            log.info("%s was processed already: acknowledged again", uid)
            return _outcome(item, uid, faults, event)
        if faults is not None:
            faults.before(event)
        if self._stopping.is_set():
            return None  # stopped while the event was on its way in: not in hand
        self._busy_since = started
        try:
            if faults is not None:
                faults.check_poison(event)
            if (result := self._handler(event)) is not None:
                _did_its_work(result)
        except BaseException as exc:  # SystemExit, CancelledError too: the event failed
            level = logging.WARNING if isinstance(exc, Exception) else logging.ERROR
            log.log(level, "handler failed on %s: %s: %s", uid, type(exc).__name__, exc)
            return Outcome(item.session, item.seq, uid, nack_text(exc))
        finally:
            self._busy_since = None
        self.processed += 1
        if self._recorder is not None:
            self._recorder.write(event)
        return _outcome(item, uid, faults, event)


def _partition_of(item: Item) -> tuple[int, str, Any]:
    """The partition sub-queue of a pushed event, in its session."""
    return item.session, item.event["publisher_id"], item.event["partition"]


def _outcome(item: Item, uid: str, faults: Faults | None, event: dict[str, Any]) -> Outcome:
    """A processed event's outcome: the drop-acks fault may leave its ack out."""
    if faults is None:
        return Outcome(item.session, item.seq, uid)
    return Outcome(item.session, item.seq, uid, dropped=faults.drop_ack(event))


def nack_text(exc: BaseException) -> str:
    """A handler's error as the nack carries it: always valid UTF-8 (a lone surrogate, as
    in an undecodable file name, is escaped), or the broker would refuse the ack."""
    text = f"{type(exc).__name__}: {exc}"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _unpacked(delivery: Any) -> Any:
    """A packed push with its events decoded (by msgspec, in C: the channel's own pushes,
    behind the callback secret). What is not one is left for _parse_delivery to refuse."""
    if isinstance(delivery, dict) and type(events := delivery.get("events")) is bytes:
        try:
            return {**delivery, "events": _EVENTS_DECODER.decode(events)}
        except (msgspec.DecodeError, RecursionError) as exc:
            raise InvalidArgument("events", f"not a msgpack list of events: {exc}") from None
    return delivery


_EVENTS_DECODER = msgspec.msgpack.Decoder()


def _parse_delivery(delivery: Any) -> tuple[int, int, list[dict[str, Any]]]:
    """Check a push's shape (session, first seq, events with ids and publisher ids)
    before queueing it."""
    if not isinstance(delivery, dict):
        raise InvalidArgument("delivery", "must be a map")
    session, seq, events = delivery.get("session"), delivery.get("seq"), delivery.get("events")
    if type(session) is not int or type(seq) is not int or not isinstance(events, list):
        raise InvalidArgument("delivery", "needs an int session, an int seq and a list of events")
    if not all(
        isinstance(ev, dict) and type(ev.get("id")) is str and type(ev.get("publisher_id")) is str
        for ev in events
    ):
        raise InvalidArgument("events", "each must be a map with a string id and publisher_id")
    return session, seq, events


def _runs_later(handler: Callable[..., Any]) -> bool:
    """A coroutine or generator function (or an object whose ``__call__`` is one):
    calling it runs none of its body. Such a handler was accepted, and every event was
    acknowledged unprocessed (session 34's newcomer)."""
    later = (inspect.iscoroutinefunction, inspect.isgeneratorfunction, inspect.isasyncgenfunction)
    calls = (handler, getattr(handler, "__call__", None))  # noqa: B004 - callable already
    return any(check(call) for call in calls for check in later if call is not None)


def _did_its_work(result: Any) -> None:
    """A handler that returned a coroutine or a generator ran none of its work (a lambda
    calling an async def, say): the event fails, and the object is closed unawaited."""
    if inspect.isawaitable(result) or inspect.isgenerator(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()
        kind = type(result).__name__
        raise TypeError(f"the handler returned a {kind}, which does its work only when run")
