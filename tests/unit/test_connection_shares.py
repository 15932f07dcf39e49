"""ConnectionShares: one user may hold only its share of a daemon's connections."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from channel_server.connection_shares import USER_ATTRIBUTE, ConnectionShares
from channel_server.errors import LimitReached
from channel_server.transport import TransportConfig
from channel_server.users import owner


def conn_of(name: str | None) -> SimpleNamespace:
    """A connection as a gate leaves it: with its user (None: a callback's caller)."""
    conn = SimpleNamespace()
    if name is not None:
        setattr(conn, USER_ATTRIBUTE, owner() if name == "owner" else SimpleNamespace(name=name))
    return conn


def test_a_user_past_its_share_is_refused_and_others_are_not() -> None:
    shares = ConnectionShares()
    held = [conn_of("bob") for _ in range(3)]
    for conn in held:
        shares.take(conn, limit=3, users_limit=100)
    with pytest.raises(LimitReached, match="user bob has reached its limit of 3 connections"):
        shares.take(conn_of("bob"), limit=3, users_limit=100)
    shares.take(conn_of("alice"), limit=3, users_limit=100)
    assert (shares.held("bob"), shares.held("alice")) == (3, 1)


def test_a_closed_connection_frees_its_place_once() -> None:
    shares = ConnectionShares()
    first, second = conn_of("bob"), conn_of("bob")
    shares.take(first, limit=2, users_limit=100)
    shares.take(second, limit=2, users_limit=100)
    shares.release(first)
    shares.release(first)  # a connection ends once; a second report changes nothing
    assert shares.held("bob") == 1
    shares.take(conn_of("bob"), limit=2, users_limit=100)
    with pytest.raises(LimitReached):
        shares.take(conn_of("bob"), limit=2, users_limit=100)


def test_a_refused_connection_holds_no_place() -> None:
    shares = ConnectionShares()
    shares.take(conn_of("bob"), limit=1, users_limit=100)
    refused = conn_of("bob")
    with pytest.raises(LimitReached):
        shares.take(refused, limit=1, users_limit=100)
    shares.release(refused)  # its worker still reports it ended
    assert shares.held("bob") == 1


def test_the_owner_and_callers_without_a_user_are_not_counted() -> None:
    shares = ConnectionShares()
    for _ in range(5):
        shares.take(conn_of("owner"), limit=1, users_limit=100)
        shares.take(conn_of(None), limit=1, users_limit=100)
    assert shares.held("owner") == 0


def test_a_users_share_is_half_the_connections_unless_set() -> None:
    assert TransportConfig(max_connections=256).per_user_limit == 128
    assert TransportConfig(max_connections=1).per_user_limit == 1
    assert TransportConfig(max_connections=256, max_connections_per_user=10).per_user_limit == 10


def test_users_together_leave_an_eighth_of_the_connections_to_the_owner() -> None:
    """Two users at their shares (half each) held every connection, and the owner's own
    CLI was refused as busy (session 32)."""
    config = TransportConfig(max_connections=256)
    assert (config.per_user_limit, config.users_limit) == (128, 224)
    assert TransportConfig(max_connections=4).users_limit == 3
    assert TransportConfig(max_connections=1).users_limit == 1
    shares = ConnectionShares()
    for _ in range(128):
        shares.take(conn_of("alice"), config.per_user_limit, config.users_limit)
    for _ in range(96):
        shares.take(conn_of("bob"), config.per_user_limit, config.users_limit)
    with pytest.raises(LimitReached, match="limit of 224 connections of users"):
        shares.take(conn_of("bob"), config.per_user_limit, config.users_limit)
    shares.take(conn_of("owner"), config.per_user_limit, config.users_limit)  # not counted
    assert shares.held("bob") == 96
