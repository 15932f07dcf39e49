"""A channel's sessions grow from one life to the next whatever its broker's clock says
(DESIGN §5: a subscriber refuses pushes of a session older than one it saw). They began
at the clock in microseconds: a broker restarted with its clock set back gave out older
sessions, and a subscriber that kept running refused every push of the new life."""

from __future__ import annotations

from pathlib import Path

from channel_server.channel import EventChannel
from channel_server.config import ChannelConfig
from channel_server.dispatch import DispatchPool
from channel_server.store.sqlite import SQLiteStore
from tests.inprocess.conftest import FakeClock


def life_session(data: Path, pool: DispatchPool, clock: FakeClock) -> int:
    """The session a member gets in one life of a channel over the store in ``data``,
    restored as a broker restores it."""
    store = SQLiteStore(data)
    channel = EventChannel("c", ChannelConfig(), store, pool, clock=clock)
    try:
        channel.restore()
        return channel.subscribe("m1")["session"]
    finally:
        channel.close()
        store.close()


def test_a_life_whose_clock_was_set_back_gives_out_newer_sessions(
    tmp_path: Path, pool: DispatchPool, clock: FakeClock
) -> None:
    first = life_session(tmp_path / "data", pool, clock)
    clock.advance(-3600.0)  # stepped back an hour before the restart
    second = life_session(tmp_path / "data", pool, clock)
    assert second > first
    clock.advance(7200.0)  # then an hour past the first life's clock: sessions follow it
    assert life_session(tmp_path / "data", pool, clock) >= int(clock() * 1_000_000)
