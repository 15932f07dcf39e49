"""Publisher: find a channel by name and publish batches of events to it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import Pyro5.errors

from channel_server.errors import BrokerUnavailable, ChannelError, QueueFull
from channel_server.lookup import resolve_channel
from channel_server.wire import DEFAULT_HOST, DEFAULT_NS_PORT, check_name, make_proxy
from publisher.state import SequenceFile

log = logging.getLogger(__name__)
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
        timeout_s: float = DEFAULT_TIMEOUT_S,
        next_seq: int | None = None,
        sequence: SequenceFile | None = None,
        retry_for_s: float = 0.0,
    ) -> None:
        """``sequence`` persists the id sequence (``next_seq`` overrides what it holds);
        ``retry_for_s`` > 0 retries a batch through the name server for that long when
        the broker is unreachable (safe: a batch that did arrive comes back duplicate)."""
        self.channel = check_name("channel", channel)
        self.publisher_id = check_name("publisher_id", publisher_id)
        self._sequence = sequence
        stored = sequence.load() if sequence is not None else None
        self.next_seq = next_seq if next_seq is not None else stored or FIRST_SEQ
        self._ns = (ns_host, ns_port)
        self._timeout_s = timeout_s
        self._retry_for_s = retry_for_s
        self._proxy = make_proxy(
            resolve_channel(ns_host, ns_port, channel, create=create), timeout_s
        )
        self.retries = 0

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._proxy._pyroRelease()

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
        unrouted); raises InvalidEvent (nothing stored) or QueueFull (the front stored)."""
        if self._sequence is not None:
            self._sequence.reserve(self.next_seq)
        deadline = time.monotonic() + self._retry_for_s
        while True:
            try:
                return self._proxy.publish(events)
            except Pyro5.errors.CommunicationError as exc:
                if time.monotonic() >= deadline:
                    raise BrokerUnavailable(f"channel {self.channel}", str(exc)) from exc
                log.warning("publish to %s failed (%s); retrying", self.channel, exc)
                self.retries += 1
                time.sleep(RETRY_PAUSE_S)
                self._reconnect()

    def _reconnect(self) -> None:
        """Find the channel again through the name server (the broker may have moved)."""
        self._proxy._pyroRelease()
        try:
            uri = resolve_channel(*self._ns, self.channel)
        except ChannelError as exc:
            log.warning("channel %s not found yet: %s", self.channel, exc)
            return
        self._proxy = make_proxy(uri, self._timeout_s)

    def publish_all(
        self,
        events: Iterable[dict[str, Any]],
        batch_size: int,
        wait_when_full: bool = False,
        after_batch: Callable[[int], None] | None = None,
    ) -> PublishTotals:
        """Publish in batches. A QueueFull is counted as refused, or waited out and retried
        (with the channel's hint) when ``wait_when_full``. ``after_batch(n)`` runs after
        the n-th batch."""
        totals = PublishTotals()
        for calls, batch in enumerate(_chunks(events, batch_size), start=1):
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
                    time.sleep(full.retry_after_s)  # back-pressure asked for by the channel
            if after_batch is not None:
                after_batch(calls)
        return totals


def _chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
