"""Publisher: find a channel by name and publish batches of events to it."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from channel_server.errors import QueueFull
from channel_server.lookup import resolve_channel
from channel_server.wire import DEFAULT_HOST, DEFAULT_NS_PORT, check_name, make_proxy

DEFAULT_TIMEOUT_S = 30.0


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
        next_seq: int = 1,
    ) -> None:
        self.channel = check_name("channel", channel)
        self.publisher_id = check_name("publisher_id", publisher_id)
        self.next_seq = next_seq
        uri = resolve_channel(ns_host, ns_port, channel, create=create)
        self._proxy = make_proxy(uri, timeout_s)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._proxy._pyroRelease()

    def event(
        self, payload: Any = None, partition: str | int = 0, timestamp: float | None = None
    ) -> dict[str, Any]:
        """A new event dict with the next id."""
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
        return self._proxy.publish(events)

    def publish_all(
        self, events: Iterable[dict[str, Any]], batch_size: int, wait_when_full: bool = False
    ) -> PublishTotals:
        """Publish in batches. A QueueFull is counted as refused, or waited out and retried
        (with the channel's hint) when ``wait_when_full``."""
        totals = PublishTotals()
        for batch in _chunks(events, batch_size):
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
        return totals


def _chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
