"""SQLiteStore transactions: a write that fails half-way must not poison the next one."""

from __future__ import annotations

from pathlib import Path

import pytest

from channel_server.errors import StoreError
from channel_server.events import Event
from channel_server.store.base import ChannelRecord
from channel_server.store.sqlite import SQLiteStore


def ev(offset: int, payload: object) -> Event:
    return Event(f"e{offset}", "pub", 0, float(offset), payload, offset)


def test_a_failed_append_leaves_the_store_usable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "data")
    try:
        store.save_channel(ChannelRecord("c", "queue"))
        # The payload cannot be packed (an int beyond 64 bits): the append fails inside
        # its transaction, with an error that is not an sqlite3.Error.
        with pytest.raises((OverflowError, StoreError)):
            store.append("c", [ev(0, "fine"), ev(1, 2**64)], next_offset=2, accepted_at=0.0)
        assert store.load("c").events == []
        store.append("c", [ev(2, "next")], next_offset=3, accepted_at=1.0)
        assert [e.id for e in store.load("c").events] == ["e2"]
    finally:
        store.close()
