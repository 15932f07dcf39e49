"""The subscriber's inbox: sessions only move forward, a newer one drops the older's rest."""

from __future__ import annotations

import pytest

from subscriber.inbox import Inbox, Outbox, Outcome, StaleSession


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
