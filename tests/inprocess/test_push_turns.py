"""A push the pool may give a spare thread at once: one whose member has a push's worth
queued (waiting for a turn would not make it fuller); a short one waits for a turn."""

from __future__ import annotations

from typing import Any

import Pyro5.api
import Pyro5.server
import pytest

from channel_server.dispatch import DispatchPool
from tests.inprocess.conftest import CALLBACK_SECRET, ChannelFactory, event
from tests.integration.procs import wait_until


class HoldingSubscriber:
    """Takes every push and acknowledges nothing: what it was given stays in flight."""

    @Pyro5.api.expose
    def deliver(self, delivery: dict[str, Any]) -> dict[str, Any]:
        return {"queued": len(delivery["events"])}

    @Pyro5.api.expose
    def ping(self) -> str:
        return "ok"


def in_flight(channel: Any) -> int:
    (member,) = channel.stats()["groups"]["default"]["members"]
    return int(member["in_flight"])


def test_a_push_is_full_when_its_member_has_a_push_worth_queued(
    make_channel: ChannelFactory,
    daemon: Pyro5.server.Daemon,
    pool: DispatchPool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fulls: list[bool] = []
    submit = pool.submit

    def recording(task: Any, delay_s: float = 0.0, full: bool = False) -> None:
        fulls.append(full)
        submit(task, delay_s, full)

    monkeypatch.setattr(pool, "submit", recording)
    channel = make_channel(answer_wait_s=0.0, dispatch_linger_s=0.0, stream_linger_s=0.0)
    uri = str(daemon.register(HoldingSubscriber(), "sub.s1"))
    channel.subscribe("s1", uri, callback_secret=CALLBACK_SECRET, prefetch=10)
    channel.publish([event(f"a{i}", ts=float(i)) for i in range(5)])
    wait_until(lambda: in_flight(channel) == 5, what="the first push")
    assert fulls and not any(fulls), "5 queued for a room of 10 is a short push"
    fulls.clear()
    channel.publish([event(f"b{i}", partition=1 + i, ts=float(10 + i)) for i in range(30)])
    wait_until(lambda: in_flight(channel) == 10, what="the second push")
    assert fulls[0], "30 queued (in partitions of their own) for a room of 5 is a full push"
