"""PerTopic: one client per topic, the reply-dropping fault only on the first, all closed."""

from __future__ import annotations

from channel_client.per_topic import PerTopic


def test_one_client_per_topic_made_once_and_all_closed_once() -> None:
    made: list[tuple[str, int, bool]] = []
    closed: list[str] = []

    def make(topic: str, drops: int, create: bool) -> str:
        made.append((topic, drops, create))
        return f"client-{topic}"

    clients = PerTopic(make, closed.append, drop_replies=2)
    assert clients.get("a", create=True) == "client-a"
    assert clients.get("a") == "client-a"
    assert clients.get("b") == "client-b"
    assert made == [("a", 2, True), ("b", 0, False)]  # the fault goes to the first only
    clients.close()
    clients.close()
    assert sorted(closed) == ["client-a", "client-b"]


def test_the_least_recently_used_past_the_bound_are_closed_and_made_again() -> None:
    """One client per topic ever touched held a broker connection each, for the client's
    whole life (session 34's soak: 60 connections for 30 topics)."""
    made: list[str] = []
    closed: list[str] = []

    def make(topic: str, drops: int, create: bool) -> str:
        made.append(topic)
        return topic

    clients = PerTopic(make, closed.append, max_open=2)
    clients.get("a")
    clients.get("b")
    clients.get("a")  # used again: b is now the least recent
    clients.get("c")
    assert closed == ["b"]
    clients.get("b")  # made again
    assert (made, closed) == (["a", "b", "c", "b"], ["b", "a"])
    clients.drop("c")
    clients.drop("never")
    assert closed == ["b", "a", "c"]
    clients.close()
    assert closed == ["b", "a", "c", "b"]
