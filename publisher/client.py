"""Publisher: find a channel by name, publish batches of events, wait for them to be done.

Ids are ``"<publisher_id>-<seq>"``. The sequence is kept in the state dir the command-line
publisher uses (``$PUBSUB_STATE_DIR``, else ``$XDG_STATE_HOME/pubsub-channels``, else
``~/.local/state/pubsub-channels``; one ``publisher-<id>.json`` per publisher id), so a
script run again goes on with new ids instead of repeating ones the channel remembers and
silently drops as duplicates.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

from channel_client.remote import ClientOptions, RemoteChannel, polling
from channel_client.reply_spin import CALLER_SPIN_S
from channel_client.statefile import default_state_dir
from channel_server.errors import (
    ClientError,
    InvalidArgument,
    InvalidEvent,
    ProcessingTimeout,
    QueueFull,
    StoreError,
)
from channel_server.events import IdScope, Partition, pack_batch, validate_batch
from channel_server.log_throttle import Throttle
from channel_server.wire import DEFAULT_HOST, DEFAULT_NS_PORT, check_name
from publisher.pipeline import SendPipeline
from publisher.state import PublisherState

log = logging.getLogger(__name__)
_waits = Throttle(log)
"""A full channel waited out is said once per LOG_EVERY_S (a wait may last long)."""
T = TypeVar("T")
DEFAULT_TIMEOUT_S = 30.0
FIRST_SEQ = 1
RESERVE_AHEAD = 1000
"""Sequence numbers a publisher with a state file reserves beyond the batch it sends: the
file is written (and synced) once per this many ids instead of before every batch (0.6 ms
each on this kind of machine: as much as a one-event publish). A publisher that dies
without closing skips at most this many ids on its next run; none is ever reused."""
RETRY_PAUSE_S = 0.2
DEFAULT_RETRY_FOR_S = 30.0
"""How long a call is retried through the name server by default: a broker restart (an
upgrade, a crash) takes seconds, and a publisher should ride it out, as the CLI does."""
STOP_CHECK_S = 0.2
"""How often ``submit_all`` looks at its stop event while it waits (for room, for sends)."""
DEFAULT_PARTITIONS = 16
"""Partitions an event given no partition is spread over (partition ``seq % 16``), like
``publisher publish --partitions P``. A partition goes whole to one subscriber at a time,
so this bounds how many subscribers work on one publisher's events at once (16; ask for
more with ``partitions=``) and how evenly they share them: 1, 2, 4, 8 or 16 subscribers
get equal shares, 3, 5 or 6 differ by one partition (work stealing evens out the rest).
Few enough that ``status`` and the broker's partition bookkeeping stay small."""


class StateDir(Enum):
    """Where a Publisher keeps its id sequence when it is not told."""

    DEFAULT = "default"
    """``$PUBSUB_STATE_DIR``, else ``$XDG_STATE_HOME/pubsub-channels``, else
    ``~/.local/state/pubsub-channels``: the command-line publisher's."""


@dataclass
class PublishTotals:
    """Running counts over many batches."""

    accepted: int = 0
    duplicates: int = 0
    refused: int = 0
    unrouted: int = 0
    duplicate_ids: list[str] = field(default_factory=list)
    stopped: bool = False
    """Publishing stopped early when asked to (a signal): the rest was not sent."""

    @property
    def sent(self) -> int:
        """Events the channel answered for, whatever it did with them."""
        return self.accepted + self.duplicates + self.refused + self.unrouted

    def merge(self, other: PublishTotals) -> None:
        self.accepted += other.accepted
        self.duplicates += other.duplicates
        self.refused += other.refused
        self.unrouted += other.unrouted
        self.duplicate_ids.extend(other.duplicate_ids)
        self.stopped = self.stopped or other.stopped

    def add(self, summary: dict[str, Any]) -> None:
        self.accepted += summary["accepted"]
        self.duplicates += len(summary["duplicates"])
        self.duplicate_ids.extend(summary["duplicates"])
        self.unrouted += summary.get("unrouted", 0)


class Publisher:
    """Publishes to one channel and waits for its events to be processed.

    Ids are ``"<publisher_id>-<seq>"``; the sequence is persisted in ``state_dir`` before
    each batch is sent, so neither a re-run nor a crash reuses one (a crash may skip
    numbers). Events given no partition are spread round robin over ``partitions``.
    The proxy belongs to the thread that first publishes; use one Publisher per thread.
    ``submit`` publishes in the background, from a sender thread of its own; threads may
    share a Publisher for ``event`` and ``submit``.
    """

    def __init__(
        self,
        channel: str,
        publisher_id: str,
        *,
        ns_host: str = DEFAULT_HOST,
        ns_port: int = DEFAULT_NS_PORT,
        create: bool = False,
        kind: str = "queue",
        id_scope: str | None = None,
        partitions: int = DEFAULT_PARTITIONS,
        state_dir: str | os.PathLike[str] | StateDir | None = StateDir.DEFAULT,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        next_seq: int | None = None,
        state: PublisherState | None = None,
        retry_for_s: float = DEFAULT_RETRY_FOR_S,
        drop_replies: int = 0,
        reply_spin_s: float = CALLER_SPIN_S,
    ) -> None:
        """``create``: host the channel (a ``kind`` ``queue`` or ``topic``) if nobody
        does yet; ``id_scope`` (``publisher`` or ``channel``): where the channel's ids must
        be unique, for a channel ``create`` makes; an existing channel with another scope
        raises ChannelConflict (None: whatever it has, or the broker's default);
        ``partitions``: events given no partition go to partition ``seq % partitions``;
        ``state_dir``: where the id sequence is kept (see StateDir.DEFAULT; None: in memory
        only, so ids start at 1 on every run and a re-run's are duplicates); ``next_seq``
        overrides the stored sequence; ``state``: an open PublisherState instead of
        ``state_dir`` (the CLI shares one with its put journal); ``retry_for_s``: how
        long a call is retried through the name server while the broker is unreachable
        or restarting (safe: a batch that did arrive comes back duplicate; 0: one try);
        ``reply_spin_s``: the longest ``publish`` waits for a quick reply awake, where that
        is seen to pay (:mod:`~channel_client.reply_spin`; 0: never).

        Raises UnknownChannel (no such channel and not ``create``), BrokerUnavailable,
        InvalidArgument (a bad name or ``partitions``), StoreError (an unusable state
        file)."""
        self.channel = check_name("channel", channel)
        self.publisher_id = check_name("publisher_id", publisher_id)
        if type(partitions) is not int or partitions < 1:
            raise InvalidArgument("partitions", "must be a whole number >= 1")
        self.partitions = partitions
        if state is None and state_dir is not None:
            where = default_state_dir() if state_dir is StateDir.DEFAULT else Path(state_dir)
            state = PublisherState(where, self.publisher_id)
        self.state = state
        self.state_file: Path | None = state.file.path if state is not None else None
        """Where the sequence is kept (None: in memory only)."""
        stored = state.next_seq(channel) if state is not None else None
        self.next_seq = next_seq if next_seq is not None else stored or FIRST_SEQ
        self._reserved = stored or 0
        """The sequence this publisher recorded last: numbers below it are used or
        reserved (see RESERVE_AHEAD)."""
        self._floor = stored or 0
        self._journaled = 0
        """What a Putter's journal last recorded as this sequence (:meth:`journaled`): a
        write of its own, not another process's."""
        """The most the state file held before this publisher reserved: a close never
        gives numbers back below it."""
        self._warned_duplicates = False
        self._warned_unrouted = False
        """Said once; a Putter sets it (not keeping a put nobody subscribed to is what a
        topic does, and its line says so)."""
        attempts = 1 + int(retry_for_s / RETRY_PAUSE_S)
        self._options = ClientOptions(
            ns_host, ns_port, attempts, timeout_s, drop_replies, reply_spin_s
        )
        self._id_scope = id_scope
        self._remote = RemoteChannel(
            self._options,
            channel,
            create=create,
            kind=kind,
            id_scope=id_scope,
            pause_s=RETRY_PAUSE_S,
            awake=True,  # the caller's own thread; the sender's waits overlap its work
        )
        self._remote.call("ping")  # fail fast on a wrong name or a missing broker
        self._packing = _Packing(channel)
        """Whether batches go packed (both connections: an older broker takes lists)."""
        self._sender: tuple[SendPipeline, RemoteChannel] | None = None
        self._sender_retries = 0
        """Retries of the senders ended so far (``retries`` counts them too)."""
        """What ``submit`` sends through: made by its first call, with a connection of its
        own that only the pipeline's sender thread uses."""
        # The sequence lock. Guards next_seq, _reserved, _floor and the making of
        # _sender: threads sharing the Publisher may call event and submit at once.
        self._seq_lock = threading.Lock()
        self._owned = False
        """Whether a thread used it yet: the first to publish (or wait) becomes its
        proxy's owner, whichever thread made it."""
        self._closed = False
        self._forked = False
        """Made before this process forked (see :meth:`_check_process`)."""
        with _LIVE_LOCK:  # checked and added at once: two threads may make one each
            if (other := self._sharing_its_sequence()) is not None:
                self._remote.release()
                raise InvalidArgument("publisher_id", _SAME_ID.format(p=other))
            _LIVE.add(self)

    def _sharing_its_sequence(self) -> Publisher | None:
        """An open Publisher of this process numbering events from the same state file
        for the same channel: both would give events the same ids, and the channel keep
        one of each (session 34's newcomer: 8 Publishers of one id, 7 of 8 events dropped
        as duplicates, only a warning said so)."""
        if self.state_file is None:
            return None  # a sequence in memory: starting over is the caller's choice
        for other in _LIVE:
            if other._closed or other._forked or other is self:
                continue
            if other.state_file == self.state_file and other.channel == self.channel:
                return other
        return None

    def _check_open(self) -> None:
        self._check_process()
        if self._closed:  # as a closed file: its sequence was given back at close
            raise ValueError(f"publisher {self.publisher_id} of {self.channel} is closed")

    def _check_process(self) -> None:
        """A Publisher made before a fork() belongs to the parent: the child shares its
        connection and its id sequence, so their calls crossed (BrokerUnavailable on a
        healthy broker) and both numbered events alike (150 of 200 dropped as
        duplicates: session 34's newcomer)."""
        if self._forked:
            raise InvalidArgument(
                "publisher",
                f"{self.publisher_id} of {self.channel} was made before this process "
                "forked: its connection and id sequence are the parent's; make a Publisher "
                "in each process, with an id of its own",
            )

    def _call(self, method: str, *args: Any) -> Any:
        if not self._owned:
            self._remote.claim()
            self._owned = True
        return self._remote.call(method, *args)

    @property
    def retries(self) -> int:
        """Calls sent again after a broker did not answer (its ``retry_for_s``): those of
        the caller's thread and those of ``submit``'s sender."""
        sender = self._sender  # (read once: a close may end it meanwhile)
        return self._remote.retries + self._sender_retries + (sender[1].retries if sender else 0)

    def channel_id_scope(self) -> IdScope:
        """Where the channel's event ids must be unique (``publisher`` or ``channel``), as
        its ``stats`` say: a batch planned for it must dedupe the same way, or the plan
        drops events the channel would accept. A broker that does not say gets the scope
        this publisher asked for, else ``publisher``: the narrower dedupe, whose leftovers
        the channel still reports as duplicates (never a silent drop)."""
        self._check_open()
        scope = self._call("stats").get("ids") or self._id_scope
        return IdScope(scope or IdScope.PUBLISHER)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Send what was submitted (a QueueFull is no longer waited out: those
        submissions fail, each with its own QueueFull), give back the sequence numbers
        reserved and not used (a re-run goes on where this one stopped), and the
        connections. Publishing, submitting or waiting afterwards raises ValueError; a
        second close does nothing."""
        if self._forked:  # the parent's to close: nothing of it is this process's
            self._closed = True
            return
        with self._seq_lock:  # a submit of another thread gets in before, or is refused
            if self._closed:
                return
            self._closed = True
        try:
            self._end_sending()
            with self._seq_lock:
                if self.state is not None and self._reserved > self.next_seq:
                    reserved, self._reserved = self._reserved, self.next_seq
                    self._release(self.state, reserved)
        finally:
            self._remote.release()

    def _release(self, state: PublisherState, reserved: int) -> None:
        """Give back the numbers reserved and not used. A failure (a full disk) only
        costs a gap in the ids, so it is logged, not raised from ``close``."""
        try:
            state.release(self.channel, reserved, max(self.next_seq, self._floor))
        except StoreError as exc:
            first, last = self.next_seq, reserved - 1
            log.warning("%s: ids %d-%d stay reserved (%s)", self.publisher_id, first, last, exc)

    def event(
        self,
        payload: Any = None,
        partition: Partition | None = None,
        timestamp: float | None = None,
    ) -> dict[str, Any]:
        """A new event dict with the next id (persisted when its batch is published).
        ``partition`` None: partition ``seq % partitions``, spreading events evenly over
        the subscribers; give one (a str or int) when events must be processed in order:
        each partition is delivered in ``(timestamp, offset)`` order. ``timestamp``
        defaults to now."""
        self._check_process()
        with self._seq_lock:
            seq = self.next_seq
            self.next_seq += 1
        return {
            "id": f"{self.publisher_id}-{seq}",
            "publisher_id": self.publisher_id,
            "partition": seq % self.partitions if partition is None else partition,
            "timestamp": time.time() if timestamp is None else timestamp,
            "payload": payload,
        }

    def publish(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """Publish one batch. Returns the channel's summary (``accepted``, ``duplicates``:
        the ids it had already, ``refused``, ``unrouted``); when every event of a
        non-empty batch was a duplicate, also a ``warning`` saying why nothing will be
        processed (logged too, once per Publisher). Raises InvalidEvent (nothing
        stored), QueueFull (the front stored) or BrokerUnavailable (after the retries);
        ValueError once closed. What was submitted before is sent first, so the two keep
        their order (TimeoutError when that takes longer than a send's retries)."""
        self._check_open()
        self.flush(self._close_wait_s())
        with self._seq_lock:
            self._reserve()
        try:
            summary = _publish_once(self._remote, self._call, self._packing, events)
        except (ValueError, ClientError):
            # The broker refuses some batches whole, without naming the event (msgpack
            # refuses an integer map key as it decodes): say which event and field.
            validate_batch(events, max_payload_bytes=sys.maxsize)
            raise
        if events and len(summary["duplicates"]) == len(events):
            summary["warning"] = self._all_duplicates(summary["duplicates"])
        elif summary.get("unrouted"):
            summary["warning"] = self._unrouted(summary["unrouted"])
        return summary

    def journaled(self, next_seq: int) -> None:
        """A Putter journaled a put of this Publisher's with the sequence at ``next_seq``
        (in the state file, as a reservation is)."""
        with self._seq_lock:
            self._journaled = next_seq

    def _reserve(self) -> None:
        """Record the sequence ahead of the ids about to be sent (see RESERVE_AHEAD;
        under the sequence lock)."""
        if self.state is not None and self.next_seq > self._reserved:
            ahead = self.next_seq + RESERVE_AHEAD
            before = self.state.reserve(self.channel, ahead)
            if before > self._reserved and before != self._journaled:  # another process's
                raise InvalidArgument("publisher_id", _OTHER_PROCESS.format(p=self, n=before))
            self._floor = max(self._floor, before)
            self._reserved = ahead

    def submit(
        self, events: list[dict[str, Any]], *, timeout_s: float | None = None
    ) -> Future[dict[str, Any]]:
        """Publish a batch in the background: returns at once with a Future of what
        ``publish`` would return (or raise) for these events. One event per call is fine:
        a sender thread sends whatever was submitted while its previous send was on its
        way as one batch, in submission order, so each partition keeps its order.

        The future is done once the channel stored the events: an InvalidEvent fails only
        the submission that holds the bad event, a QueueFull is waited out and the refused
        events sent again (before anything submitted later), BrokerUnavailable fails
        what was being sent. ``flush`` waits for every submission; ``publish``, ``wait``
        and ``close`` flush first.

        Blocks while 100,000 submitted events (or 64 MiB of payloads) wait to be sent (a
        channel that is full or away holds the caller back): TimeoutError after
        ``timeout_s`` (None: no limit). ValueError once closed. Threads may share a
        Publisher for ``event`` and ``submit`` (``publish`` and ``wait`` stay with one
        thread)."""
        with self._seq_lock:
            self._check_open()
            self._reserve()
            if self._sender is None:
                remote = RemoteChannel(self._options, self.channel, pause_s=RETRY_PAUSE_S)
                name = f"publisher-{self.publisher_id}-sender"
                publish = partial(_publish_once, remote, remote.call, self._packing)
                self._sender = SendPipeline(publish, name, self._close_wait_s()), remote
            pipeline = self._sender[0]
        return pipeline.submit(events, timeout_s)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until everything submitted is done (stored, or failed: see each future).
        TimeoutError when ``timeout_s`` passed first (None: no limit)."""
        self._check_open()
        sender = self._sender  # read once: a stopped submit_all may end it meanwhile
        if sender is not None and not sender[0].flush(timeout_s):
            raise TimeoutError(
                f"submitted events of {self.publisher_id} still being sent to "
                f"{self.channel} after {timeout_s:g} s"
            )

    def _flushed_within(self, timeout_s: float) -> float:
        """Flush what was submitted (TimeoutError past ``timeout_s``); the time left."""
        if self._sender is None:
            return timeout_s
        started = time.monotonic()
        self.flush(timeout_s)
        return max(0.0, timeout_s - (time.monotonic() - started))

    def _close_wait_s(self) -> float:
        """How long ``close`` lets the submissions in hand take: one send's retries."""
        options = self._options
        return options.attempts * (options.timeout_s + RETRY_PAUSE_S)

    def _unrouted(self, count: int) -> str:
        """Why events were not kept: the channel is a topic with no subscriber group. A
        Publisher asked to create a queue got the topic of that name and said nothing
        (session 34's newcomer); logged once per Publisher, unless it puts to topics."""
        text = (
            f"{count} events were not kept: {self.channel} is a topic and no subscriber was "
            "subscribed (a topic keeps an event only for the groups that exist when it is "
            "published)"
        )
        if not self._warned_unrouted:
            self._warned_unrouted = True
            log.warning("%s", text)
        return text

    def _all_duplicates(self, ids: list[str]) -> str:
        """Why a batch of nothing but known ids delivers nothing, and what to do."""
        shown = ids[0] if len(ids) == 1 else f"{ids[0]} ... {ids[-1]}"
        kept = f"kept in {self.state_file}" if self.state_file else "kept in memory only"
        text = (
            f"all {len(ids)} events were published to {self.channel} before ({shown}): "
            "none is delivered again. A publisher id whose ids start over (state_dir=None, "
            "another state dir, next_seq=) repeats ids the channel remembers, and so does "
            "one that another process publishes as at the same time; keep the state dir "
            f"of its earlier runs (its sequence is {kept}), or give each process a "
            "publisher id of its own"
        )
        if not self._warned_duplicates:
            self._warned_duplicates = True
            log.warning("%s", text)
        return text

    def wait(self, *, timeout_s: float) -> dict[str, Any]:
        """Block until the channel has no work of this publisher id left: every event it
        accepted was acknowledged by each consumer group that must process it, or
        dead-lettered (a handler failed it ``max_attempts`` times). Asks the channel
        (``outstanding``) at growing intervals, 20 ms to 0.5 s.

        Returns the channel's last count: ``outstanding`` (0), ``queued``, ``in_flight``
        and ``dead_letters``, this publisher's events in the dead-letter queue (from any
        run; logged as a warning when there are some). Raises ProcessingTimeout (a
        TimeoutError, with those counts) when work is left after ``timeout_s``, and
        BrokerUnavailable when the channel cannot be asked. Waits for what was submitted
        to be sent first (within the same ``timeout_s``). A ``close`` from another thread
        ends it (ValueError) within a poll's pause."""
        self._check_open()
        counts: dict[str, Any] = {}
        for _ in polling(self._flushed_within(timeout_s)):
            self._check_open()  # closed meanwhile: it waited out its whole timeout
            counts = self._call("outstanding", self.publisher_id)
            if counts["outstanding"] == 0:
                if counts["dead_letters"]:
                    log.warning(
                        "%d events of publisher %s are in %s's dead-letter queue (their "
                        "handlers failed); see: python -m channel_server dead-letters %s",
                        counts["dead_letters"],
                        self.publisher_id,
                        self.channel,
                        self.channel,
                    )
                return counts
        raise ProcessingTimeout(
            self.channel,
            self.publisher_id,
            timeout_s,
            counts["queued"],
            counts["in_flight"],
            counts["dead_letters"],
            counts.get("unserved"),  # (a broker before session 36 does not say)
        )

    def dead_letters(self) -> list[dict[str, Any]]:
        """The channel's dead-letter queue (every publisher's): each event as published,
        with its ``group``, the handler's last ``error`` and the ``failures`` counted.
        Needs ``admin`` on the channel (or the local token): NotAuthorized otherwise."""
        self._check_open()
        letters: list[dict[str, Any]] = self._call("dead_letters")
        return letters

    def replay_dead_letters(self, ids: list[str] | None = None) -> int:
        """Queue dead letters for delivery again: all (None), or those with these ids
        (every publisher's event with the id) or uids (``publisher_id/id``); returns how
        many. A replayed event starts again at ``attempt`` 1. Needs ``admin``."""
        self._check_open()
        count: int = self._call("replay_dead_letters", ids)
        return count

    def publish_all(
        self,
        events: Iterable[dict[str, Any]],
        batch_size: int,
        wait_when_full: bool = False,
        after_batch: Callable[[int], None] | None = None,
        stop: threading.Event | None = None,
        totals: PublishTotals | None = None,
    ) -> PublishTotals:
        """Publish in batches. A QueueFull is counted as refused, or waited out and retried
        (with the channel's hint) when ``wait_when_full``. ``after_batch(n)`` runs after
        the n-th batch. Once ``stop`` is set, the batch in hand is finished and the rest is
        not sent (``totals.stopped``). ``totals`` (when given) counts as it goes, so a
        caller knows what was done before an error. An InvalidEvent names the event's place
        in ``events`` (and its id), not in its batch."""
        stop = stop or threading.Event()
        totals = PublishTotals() if totals is None else totals
        for calls, batch in enumerate(_chunks(_until(events, stop), batch_size), start=1):
            pending = batch
            while pending:
                try:
                    totals.add(self.publish(pending))
                    pending = []
                except InvalidEvent as bad:
                    raise _in_input(bad, pending, batch, (calls - 1) * batch_size) from None
                except QueueFull as full:
                    totals.add({"accepted": full.accepted, "duplicates": full.duplicates})
                    if not wait_when_full:
                        totals.refused += full.refused
                        break
                    refused = set(full.refused_ids)
                    pending = [ev for ev in pending if ev["id"] in refused]
                    _waits.warning(
                        "full", "%s; waiting for its subscribers to catch up", full.args[0]
                    )
                    if stop.wait(full.retry_after_s):  # back-pressure asked for by the channel
                        totals.refused += len(pending)
                        break
            if after_batch is not None:
                after_batch(calls)
        totals.stopped = stop.is_set()
        return totals

    def submit_all(
        self,
        events: Iterable[dict[str, Any]],
        batch_size: int,
        stop: threading.Event | None = None,
        totals: PublishTotals | None = None,
    ) -> PublishTotals:
        """Publish an iterable through ``submit``, ``batch_size`` events per submission,
        and wait for them all: ``publish_all`` with ``wait_when_full``, but the next
        batches are made while earlier ones travel. Once ``stop`` is set the rest is not
        submitted (``totals.stopped``) and what was is sent without waiting out a full
        channel (its refused events are counted). Raises the first failed submission's
        other error (BrokerUnavailable, InvalidEvent ...) once all are done, ``totals``
        (when given) counting what the others did."""
        stop = stop or threading.Event()
        futures = []
        for batch in _chunks(_until(events, stop), batch_size):
            if (future := self._submit_unless(batch, stop)) is None:
                break
            futures.append(future)
        if not self._flushed_unless(stop) and self._sender is not None:
            self._end_sending()  # stopped: what is queued goes, a full channel fails it
        totals = PublishTotals() if totals is None else totals
        failed: BaseException | None = None
        for future in futures:
            error = future.exception(timeout=0)
            if isinstance(error, QueueFull) and stop.is_set():
                totals.add({"accepted": error.accepted, "duplicates": error.duplicates})
                totals.refused += error.refused
            elif error is not None:
                failed = failed or error
            else:
                totals.add(future.result(timeout=0))
        totals.stopped = stop.is_set()
        if failed is not None:
            raise failed
        return totals

    def _submit_unless(
        self, batch: list[dict[str, Any]], stop: threading.Event
    ) -> Future[dict[str, Any]] | None:
        """``submit``, waiting for room until ``stop`` is set (then None)."""
        return _unless_stopped(stop, lambda: self.submit(batch, timeout_s=STOP_CHECK_S))

    def _flushed_unless(self, stop: threading.Event) -> bool:
        """``flush``, until ``stop`` is set (then False)."""

        def flushed() -> bool:
            self.flush(STOP_CHECK_S)
            return True

        return _unless_stopped(stop, flushed) is not None

    def _end_sending(self) -> None:
        """Close the pipeline (what is queued is sent, a full channel fails it) and its
        connection; a later ``submit`` makes a new one."""
        with self._seq_lock:
            sender, self._sender = self._sender, None
        if sender is not None:
            pipeline, remote = sender
            pipeline.close()
            remote.release()
            self._sender_retries += remote.retries


OLDER_BROKER_REFUSAL = "must be a list of events, got bytes"
"""How a broker older than packed batches refuses one (it then gets the plain list)."""


def _publish_once(
    remote: RemoteChannel,
    call: Callable[..., Any],
    packing: _Packing,
    events: list[dict[str, Any]],
) -> dict[str, Any]:
    """Publish a batch through ``call`` (``remote``'s). A batch is stored in one
    transaction, so one that a retried call finds stored whole was stored by the try whose
    reply was lost: counted as accepted (``retried``: True), not as duplicates with a
    warning to look for a setup mistake (session 33's Jepsen probe: a broker frozen past
    the call timeout)."""
    tried = remote.retries
    summary = packing.publish(call, events)
    if events and remote.retries > tried and len(summary["duplicates"]) == len(events):
        return {**summary, "accepted": len(events), "duplicates": [], "retried": True}
    return summary


class _Packing:
    """Sends a batch packed (``events.pack_batch``), or as the plain list to a broker
    older than this library, which refuses a packed one: found out once per Publisher.
    Its own thread and the sender thread share it (the flag only ever goes to False)."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.packed = True

    def publish(self, call: Callable[..., Any], events: list[dict[str, Any]]) -> Any:
        if self.packed:
            try:
                return call("publish", pack_batch(events))
            except InvalidEvent as exc:
                if (exc.field, exc.reason) != ("batch", OLDER_BROKER_REFUSAL):
                    raise
                self.packed = False
                log.info("%s takes plain batches only (an older broker)", self.channel)
        return call("publish", events)


def _unless_stopped(stop: threading.Event, attempt: Callable[[], T]) -> T | None:
    """``attempt()`` again after each TimeoutError (its wait of STOP_CHECK_S ran out),
    until it returns or ``stop`` is set (then None)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            return attempt()
    return None


def _until(events: Iterable[dict[str, Any]], stop: threading.Event) -> Iterator[dict[str, Any]]:
    for event in events:
        if stop.is_set():
            return
        yield event


def _chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


_LIVE: weakref.WeakSet[Publisher] = weakref.WeakSet()
"""The process's Publishers: marked in a child after a fork (``os.register_at_fork``), and
looked through for one numbering from the same sequence."""
_LIVE_LOCK = threading.Lock()
"""Guards adding to ``_LIVE`` with the check that comes with it."""
_SAME_ID = (
    "{p.publisher_id} is open already in this process on {p.channel}, numbering its events "
    "from the same sequence ({p.state_file}): the two would give events the same ids, and "
    "the channel keep one of each. Share that Publisher (submit() may be called from any "
    "thread), close it first, or give each its own publisher id"
)

_OTHER_PROCESS = (
    "{p.publisher_id} on {p.channel} is numbering its events in another process too: its "
    "sequence ({p.state_file}) was taken up to {n} since this Publisher read it, so the "
    "next ids here would repeat that process's, and the channel keep one of each. Give "
    "each process its own publisher id (nothing of this batch was sent)"
)


def _after_fork_in_child() -> None:
    for publisher in list(_LIVE):
        publisher._forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def _in_input(
    bad: InvalidEvent, sent: list[dict[str, Any]], batch: list[dict[str, Any]], before: int
) -> InvalidEvent:
    """``bad`` about an event of ``sent`` (``batch``, or what of it a full channel
    refused), the batch that followed ``before`` events of the input, as about the input:
    its index there, and its id. It named the index in what was sent only, so a caller of
    publish_all could not tell where to go on (session 34's newcomer: 'event #50' for the
    input's 550th)."""
    if not 0 <= bad.index < len(sent):
        return bad
    event = sent[bad.index]
    place = next(i for i, candidate in enumerate(batch) if candidate is event)
    named = event.get("id") if isinstance(event, dict) else None
    reason = bad.reason if named is None else f"{bad.reason} (event id {named!r})"
    return InvalidEvent(bad.field, reason, before + place)
