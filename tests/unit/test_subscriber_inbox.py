"""The subscriber's inbox: sessions only move forward, a newer one drops the older's rest;
and its outbox, emptied whole when it stops."""

from __future__ import annotations

from typing import Any

import pytest

from subscriber.control import ChannelSession, Identity
from subscriber.inbox import ACK_BATCH_MAX, Inbox, Outbox, Outcome, StaleSession
from subscriber.processed import ProcessedIds


def ids(inbox: Inbox) -> list[str]:
    return [item.event["id"] for item in inbox.take_all(0.0)]


def test_a_newer_session_drops_what_is_left_of_the_older_one() -> None:
    inbox = Inbox()
    inbox.put(5, 1, [{"id": "a"}, {"id": "b"}])
    inbox.put(7, 1, [{"id": "c"}])
    assert (inbox.session, ids(inbox)) == (7, ["c"])


def test_a_late_push_of_an_older_session_is_refused_and_drops_nothing() -> None:
    inbox = Inbox()
    inbox.put(7, 1, [{"id": "c"}])
    with pytest.raises(StaleSession):
        inbox.put(5, 3, [{"id": "old"}])
    inbox.adopt(6)  # a late answer naming an older session: ignored too
    assert (inbox.session, inbox.count(7), ids(inbox)) == (7, 1, ["c"])
    inbox.adopt(8)
    assert inbox.session == 8 and inbox.count(7) == 0


def test_counts_are_per_session() -> None:
    inbox, outbox = Inbox(), Outbox()
    inbox.put(3, 1, [{"id": "a"}, {"id": "b"}])
    outbox.add([Outcome(3, 1, "x"), Outcome(2, 9, "y")], urgent=False)
    assert (inbox.count(3), inbox.count(2), outbox.count(3), outbox.count(2)) == (2, 0, 1, 1)


class _Channel:
    """What the session calls, recorded (a stand-in for the channel's RemoteChannel)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def call(self, method: str, *args: Any) -> dict[str, str]:
        self.calls.append((method, args))
        return {"status": "ok"}

    def release(self) -> None:
        pass


def test_a_stop_sends_every_outcome_left_not_only_one_message_of_them() -> None:
    """More outcomes than one ack message holds (a broker away for a while, a large
    prefetch): all are acknowledged before the unsubscribe, in order."""
    outbox = Outbox()
    outcomes = [Outcome(7, seq, f"p/{seq}") for seq in range(1, 2 * ACK_BATCH_MAX + 101)]
    outbox.add(outcomes, urgent=False)
    who = Identity("127.0.0.1", 1, "c", "s1", "PYRO:x@127.0.0.1:2", "secret", "g", None, 1.0, 1.0)
    session = ChannelSession(who, Inbox(), outbox, ProcessedIds(), lambda: 0.0, lambda _: 0)
    channel = _Channel()
    session._remote = channel  # type: ignore[assignment]
    session.finish(unsubscribe=True)
    session._serve()
    acks = [args for method, args in channel.calls if method == "ack"]
    acked = [uid for args in acks for uid in args[4]]
    assert acked[: len(outcomes)] == [o.uid for o in outcomes]
    assert [len(args[4]) for args in acks[:3]] == [ACK_BATCH_MAX, ACK_BATCH_MAX, 100]
    assert channel.calls[-1][0] == "unsubscribe"
