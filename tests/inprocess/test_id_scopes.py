"""Id scopes (issue 13) at the channel facade: two publishers' events with one id are two
events, got and acknowledged by uid; the delivered-ID window survives a restart over the
SQLite store as the channel's scope needs it (fake clock, no sockets)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from channel_server.channel import EventChannel
from channel_server.config import ChannelConfig
from channel_server.dispatch import DispatchPool
from channel_server.errors import InvalidArgument
from channel_server.events import IdScope, event_uid
from channel_server.store.sqlite import SQLiteStore
from tests.inprocess.conftest import FakeClock


def raw(event_id: str, pub: str, ts: float = 1.0) -> dict[str, Any]:
    return {"id": event_id, "publisher_id": pub, "partition": 0, "timestamp": ts}


def got(reply: dict[str, Any]) -> str | None:
    """The uid of the message a get returned (None: empty)."""
    if reply["status"] == "empty":
        return None
    return event_uid(reply["event"]["publisher_id"], reply["event"]["id"])


@contextmanager
def channel_on(
    data: Path, pool: DispatchPool, clock: FakeClock, scope: IdScope
) -> Iterator[EventChannel]:
    """A channel over the SQLite store in ``data``, restored as a broker restores it."""
    store = SQLiteStore(data)
    channel = EventChannel("c", ChannelConfig(), store, pool, clock=clock, id_scope=scope)
    try:
        channel.restore()
        yield channel
    finally:
        channel.close()
        store.close()


def test_a_pull_member_gets_and_acknowledges_two_publishers_events_with_one_id(
    tmp_path: Path, pool: DispatchPool, clock: FakeClock
) -> None:
    with channel_on(tmp_path / "data", pool, clock, IdScope.PUBLISHER) as channel:
        channel.subscribe("p1")
        assert channel.publish([raw("x", "A")])["accepted"] == 1
        assert channel.publish([raw("x", "B", ts=2.0)]) == {
            "accepted": 1,
            "duplicates": [],
            "refused": 0,
            "unrouted": 0,
        }
        assert got(channel.get("p1")) == "A/x"
        with pytest.raises(InvalidArgument, match="publisher_id/id"):
            channel.get("p1", "x")  # a bare id names no event: refused, not ignored
        assert got(channel.get("p1")) == "A/x"  # still held, not acked
        assert got(channel.get("p1", "A/x")) == "B/x"
        assert got(channel.get("p1", "B/x")) is None
        stats = channel.stats()
        assert (stats["ids"], stats["unacked"], stats["acked"]) == ("publisher", 0, 2)


@pytest.mark.parametrize(
    ("scope", "accepted_after_restart"),
    [(IdScope.PUBLISHER, ["C/x"]), (IdScope.CHANNEL, [])],
)
def test_the_window_survives_a_restart_as_the_scope_needs_it(
    tmp_path: Path,
    pool: DispatchPool,
    clock: FakeClock,
    scope: IdScope,
    accepted_after_restart: list[str],
) -> None:
    data = tmp_path / "data"
    with channel_on(data, pool, clock, scope) as channel:
        channel.subscribe("p1")
        first = channel.publish([raw("x", "A"), raw("x", "B", ts=2.0)])
        assert first["accepted"] == (2 if scope is IdScope.PUBLISHER else 1)
        assert got(channel.get("p1")) == "A/x"
        assert got(channel.get("p1", "A/x")) == ("B/x" if scope is IdScope.PUBLISHER else None)
    # A restart: A's x was acknowledged (its id left the events table), B's is queued
    with channel_on(data, pool, clock, scope) as channel:
        again = [raw("x", "A", ts=3.0), raw("x", "B", ts=3.0), raw("x", "C", ts=3.0)]
        outcome = channel.publish(again)
        expected_duplicates = 3 - len(accepted_after_restart)
        assert (outcome["accepted"], len(outcome["duplicates"])) == (
            len(accepted_after_restart),
            expected_duplicates,
        )
        uids = []
        reply = channel.get("p1")
        while (uid := got(reply)) is not None:
            uids.append(uid)
            reply = channel.get("p1", uid)
        restored = ["B/x"] if scope is IdScope.PUBLISHER else []
        assert uids == restored + accepted_after_restart
        assert channel.stats()["ids"] == scope.value
