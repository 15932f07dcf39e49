"""The names keeper: what it registers again, what it leaves alone, how it says so."""

from __future__ import annotations

import logging
from typing import Any

import Pyro5.errors
import pytest

from channel_server.errors import BrokerUnavailable
from channel_server.names_keeper import Entry, NamesKeeper, put_back

OURS = Entry("PYRO:ours@127.0.0.1:1", frozenset({"broker:b1"}))


class Names:
    """A name server's table, as :class:`NameService` shows it (no process)."""

    def __init__(self, **entries: str) -> None:
        self.table: dict[str, tuple[str, set[str]]] = {
            name: (uri, set()) for name, uri in entries.items()
        }
        self.away = False
        self.registered_meanwhile: dict[str, str] = {}
        """Names someone else registers between a listing and our registration."""

    def list(self, prefix: str) -> dict[str, tuple[str, set[str]]]:
        if self.away:
            raise BrokerUnavailable("name server 127.0.0.1:9090", "not reachable")
        listing = {k: v for k, v in self.table.items() if k.startswith(prefix)}
        for name, uri in self.registered_meanwhile.items():
            self.table[name] = (uri, set())
        return listing

    def register(self, name: str, uri: str, safe: bool, metadata: set[str]) -> None:
        if safe and name in self.table:
            raise Pyro5.errors.NamingError("name already registered")
        self.table[name] = (uri, metadata)


def keeper(names: Any, wanted: dict[str, Entry], dropped: list[list[str]]) -> NamesKeeper:
    return NamesKeeper(names, lambda: wanted, dropped.append, interval_s=1.0)


def test_only_missing_names_are_registered_with_their_tags() -> None:
    names = Names(**{"pubsub.channel.a": "PYRO:elsewhere@h:2"})
    wanted = {"pubsub.channel.a": OURS, "pubsub.channel.b": OURS, "pubsub.broker.b1": OURS}
    assert put_back(names, wanted) == ["pubsub.channel.b", "pubsub.broker.b1"]  # type: ignore[arg-type]
    assert names.table["pubsub.channel.a"][0] == "PYRO:elsewhere@h:2"  # someone's: it stays
    assert names.table["pubsub.channel.b"] == (OURS.uri, {"broker:b1"})


def test_a_name_registered_since_the_listing_stays_as_it_is() -> None:
    names = Names()
    names.registered_meanwhile = {"pubsub.channel.a": "PYRO:winner@h:3"}
    assert put_back(names, {"pubsub.channel.a": OURS}) == []  # type: ignore[arg-type]
    assert names.table["pubsub.channel.a"][0] == "PYRO:winner@h:3"


def test_names_put_back_are_logged_and_handed_on(caplog: pytest.LogCaptureFixture) -> None:
    names, dropped = Names(), []
    check = keeper(names, {"pubsub.channel.a": OURS}, dropped)
    with caplog.at_level(logging.WARNING):
        assert check.check() == ["pubsub.channel.a"]
        assert check.check() == []  # there now: nothing to do
    assert dropped == [["pubsub.channel.a"]]
    assert "had lost 1 of this broker's names" in caplog.text


def test_an_unreachable_name_server_is_said_once_and_its_return_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    names, dropped = Names(), []
    check = keeper(names, {"pubsub.channel.a": OURS}, dropped)
    names.away = True
    with caplog.at_level(logging.INFO):
        assert check.check() == [] and check.check() == []
        names.away = False
        assert check.check() == ["pubsub.channel.a"]
    assert caplog.text.count("cannot check this broker's names") == 1
    assert caplog.text.count("the name server answers again") == 1
