"""Publisher: find a channel by name and publish batches of events to it."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from channel_server.errors import ClientError, QueueFull
from channel_server.events import validate_batch
from channel_server.remote import RemoteChannel
from channel_server.wire import DEFAULT_HOST, DEFAULT_NS_PORT, check_name
from publisher.state import PublisherState

DEFAULT_TIMEOUT_S = 30.0
FIRST_SEQ = 1
RETRY_PAUSE_S = 0.2


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
    """Publishes to one channel. Ids are ``"<publisher_id>-<seq>"``, seq counting from 1.

    The proxy belongs to the thread that first publishes; use one Publisher per thread.
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
        timeout_s: float = DEFAULT_TIMEOUT_S,
        next_seq: int | None = None,
        state: PublisherState | None = None,
        retry_for_s: float = 0.0,
        drop_replies: int = 0,
    ) -> None:
        """``state`` persists the id sequence (``next_seq`` overrides what it holds);
        ``id_scope`` (``publisher`` or ``channel``): where the channel's ids must be unique,
        for a channel ``create`` makes; an existing channel with another scope raises
        ChannelConflict (None: whatever it has, or the broker's default);
        ``retry_for_s`` > 0 retries a batch through the name server for that long when
        the broker is unreachable (safe: a batch that did arrive comes back duplicate)."""
        self.channel = check_name("channel", channel)
        self.publisher_id = check_name("publisher_id", publisher_id)
        self.state = state
        stored = state.next_seq(channel) if state is not None else None
        self.next_seq = next_seq if next_seq is not None else stored or FIRST_SEQ
        self._remote = RemoteChannel(
            ns_host,
            ns_port,
            channel,
            create=create,
            kind=kind,
            id_scope=id_scope,
            timeout_s=timeout_s,
            attempts=1 + int(retry_for_s / RETRY_PAUSE_S),
            pause_s=RETRY_PAUSE_S,
            drop_replies=drop_replies,
        )
        self._remote.call("ping")  # fail fast on a wrong name or a missing broker

    @property
    def retries(self) -> int:
        return self._remote.retries

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._remote.release()

    def event(
        self, payload: Any = None, partition: str | int = 0, timestamp: float | None = None
    ) -> dict[str, Any]:
        """A new event dict with the next id (persisted before the batch is published)."""
        seq = self.next_seq
        self.next_seq += 1
        return {
            "id": f"{self.publisher_id}-{seq}",
            "publisher_id": self.publisher_id,
            "partition": partition,
            "timestamp": time.time() if timestamp is None else timestamp,
            "payload": payload,
        }

    def publish(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """Publish one batch. Returns the channel's summary (accepted, duplicates, refused,
        unrouted); raises InvalidEvent (nothing stored), QueueFull (the front stored) or
        BrokerUnavailable (after the retries)."""
        if self.state is not None:
            self.state.reserve(self.channel, self.next_seq)
        try:
            return self._remote.call("publish", events)
        except (ValueError, ClientError):
            # The broker may not even read the call (msgpack refuses an integer map key
            # there): say which event and field, as the broker would have.
            validate_batch(events, max_payload_bytes=sys.maxsize)
            raise

    def publish_all(
        self,
        events: Iterable[dict[str, Any]],
        batch_size: int,
        wait_when_full: bool = False,
        after_batch: Callable[[int], None] | None = None,
        stop: threading.Event | None = None,
    ) -> PublishTotals:
        """Publish in batches. A QueueFull is counted as refused, or waited out and retried
        (with the channel's hint) when ``wait_when_full``. ``after_batch(n)`` runs after
        the n-th batch. Once ``stop`` is set, the batch in hand is finished and the rest is
        not sent (``totals.stopped``)."""
        stop = stop or threading.Event()
        totals = PublishTotals()
        for calls, batch in enumerate(_chunks(_until(events, stop), batch_size), start=1):
            pending = batch
            while pending:
                try:
                    totals.add(self.publish(pending))
                    pending = []
                except QueueFull as full:
                    totals.add({"accepted": full.accepted, "duplicates": full.duplicates})
                    if not wait_when_full:
                        totals.refused += full.refused
                        break
                    refused = set(full.refused_ids)
                    pending = [ev for ev in pending if ev["id"] in refused]
                    if stop.wait(full.retry_after_s):  # back-pressure asked for by the channel
                        totals.refused += len(pending)
                        break
            if after_batch is not None:
                after_batch(calls)
        totals.stopped = stop.is_set()
        return totals


def _until(events: Iterable[dict[str, Any]], stop: threading.Event) -> Iterator[dict[str, Any]]:
    for event in events:
        if stop.is_set():
            return
        yield event


def _chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
