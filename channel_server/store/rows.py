"""Event rows shared by the durable stores (SQLite, PostgreSQL): how an event is written
and read back, and the offset runs deletes work by.

A string payload is stored as text, anything else as msgpack (bytes); reading one back
gives the size validation gave it (``Event.size``), so a restored channel counts the
bytes it queues as it did before.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

import msgpack

from channel_server.events import Event
from channel_server.payloads import payload_size

CHANNEL_TABLES = ("groups", "acks", "members", "owners", "dead_letters")
"""Tables with rows per channel beside its events, the same in both stores: what deleting a
channel deletes by its name (SQLite) or id (PostgreSQL)."""
GROUP_TABLES = (("groups", "name"), ("acks", "grp"), ("owners", "grp"), ("dead_letters", "grp"))
"""(table, group column) of every table with rows per group, the same in both stores:
what removing a group deletes."""
PAGE_ROWS = 10_000
"""Events rows a ``load`` reads at a time (a SQLite query, a PostgreSQL cursor's fetch):
SQLite's lock is let go between pages, and a page's payloads are all a restart holds at
once beyond the payload budget."""


def pack(payload: Any) -> Any:
    """Strings are stored as text; anything else as msgpack bytes."""
    return payload if type(payload) is str else msgpack.packb(payload, use_bin_type=True)


def unpack(stored: Any) -> Any:
    """A payload as :func:`pack` stored it."""
    return stored if type(stored) is str else msgpack.unpackb(bytes(stored), raw=False)


def event_fields(ev: Event) -> tuple:
    """(id, publisher id, partition, timestamp, stored payload)."""
    return (ev.id, ev.publisher_id, ev.partition, ev.timestamp, pack(ev.payload))


def event_from_row(offset: int, row: Sequence[Any]) -> Event:
    """An event from the five values :func:`event_fields` wrote."""
    event_id, publisher_id, partition, timestamp, stored = row
    return loaded(event_id, publisher_id, partition, timestamp, stored, offset)


def loaded(
    event_id: str, publisher_id: str, partition: Any, timestamp: float, stored: Any, offset: int
) -> Event:
    """An event read back, its size counted as validation counted it (``Event.size``):
    the msgpack a payload is stored as is the size of any payload but a string or bytes.
    Its publisher id and a string partition are interned, as validation does: a million
    events of a handful of publishers share a handful of strings."""
    publisher_id = sys.intern(publisher_id)
    if type(partition) is str:
        partition = sys.intern(partition)
    if type(stored) is str:
        payload, size = stored, payload_size(stored)
    else:
        stored = bytes(stored)  # a driver may give a memoryview
        payload = msgpack.unpackb(stored, raw=False)
        size = len(payload) if type(payload) is bytes else len(stored)
    return Event(
        event_id, publisher_id, partition, timestamp, payload, offset, len(event_id) + size
    )


def runs(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Offsets as sorted (first, last) runs of consecutive ones: acks retire events nearly
    in offset order, so a few range deletes replace a lookup per event."""
    found: list[tuple[int, int]] = []
    ordered = sorted(offsets)
    if not ordered:
        return found
    first = last = ordered[0]
    for offset in ordered[1:]:
        if offset > last + 1:
            found.append((first, last))
            first = offset
        last = offset
    found.append((first, last))
    return found
