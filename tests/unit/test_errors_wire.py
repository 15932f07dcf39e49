"""The error tree crosses the wire as itself; names are checked at the RPC boundary."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import Pyro5.api
import Pyro5.errors
import Pyro5.serializers
import Pyro5.server
import pytest

from channel_server import errors
from channel_server.errors import (
    ALL_ERRORS,
    ChannelError,
    InvalidArgument,
    QueueFull,
    UnknownChannel,
)
from channel_server.transport import HardenedDaemon
from channel_server.wire import (
    ANONYMOUS,
    SERIALIZER,
    broker_ns_name,
    channel_ns_name,
    check_name,
    make_proxy,
    register_errors,
)

NO_TOKEN = ANONYMOUS
"""These daemons know no token: a proxy with this process's (a broker of another test in
the same worker may have written one to the session's state dir) would wait for their
proof of it and refuse them."""

SAMPLES: dict[type[ChannelError], Callable[[], ChannelError]] = {
    errors.ChannelError: lambda: errors.ChannelError("root trouble", hint="h", count=3),
    errors.ClientError: lambda: errors.ClientError("client trouble", detail=[1, 2]),
    errors.InvalidEvent: lambda: errors.InvalidEvent("timestamp", "must be finite", 4),
    errors.InvalidArgument: lambda: errors.InvalidArgument("prefetch", "must be 1-10000"),
    errors.UnknownChannel: lambda: errors.UnknownChannel("orders"),
    errors.SubscriberIdInUse: lambda: errors.SubscriberIdInUse("sub-1", "default"),
    errors.NotSubscribed: lambda: errors.NotSubscribed("sub-2", "news"),
    errors.MemberActive: lambda: errors.MemberActive("sub-3", "default", "orders"),
    errors.NotAuthorized: lambda: errors.NotAuthorized("no credential", "publish", "orders"),
    errors.ChannelConflict: lambda: errors.ChannelConflict("orders", "ids", "channel", "publisher"),
    errors.ChannelInUse: lambda: errors.ChannelInUse("orders", 2, 30, 1),
    errors.FaultInjectionDisabled: lambda: errors.FaultInjectionDisabled("kill_queues"),
    errors.CapacityError: lambda: errors.CapacityError("busy", retry_after_s=1.5),
    errors.QueueFull: lambda: errors.QueueFull(
        "orders", 10, 3, ["e4", "e5"], duplicates=["e1"], retry_after_s=0.25
    ),
    errors.LimitReached: lambda: errors.LimitReached("channels", 1000, "broker b1"),
    errors.TransportError: lambda: errors.TransportError("peer gone", peer="PYRO:x@h:1"),
    errors.BrokerUnavailable: lambda: errors.BrokerUnavailable("name server", "not reachable"),
    errors.ProcessingTimeout: lambda: errors.ProcessingTimeout("orders", "PUB", 30.0, 9, 3, 2),
    errors.StoreError: lambda: errors.StoreError("/data/c.db", "database is locked"),
    errors.LeaseLost: lambda: errors.LeaseLost("orders"),
}

EXPECTED_ATTRIBUTES: dict[type[ChannelError], dict[str, object]] = {
    errors.InvalidEvent: {"field": "timestamp", "reason": "must be finite", "index": 4},
    errors.InvalidArgument: {"argument": "prefetch", "reason": "must be 1-10000"},
    errors.UnknownChannel: {"channel": "orders"},
    errors.SubscriberIdInUse: {"subscriber_id": "sub-1", "group": "default"},
    errors.NotSubscribed: {"subscriber_id": "sub-2", "channel": "news"},
    errors.MemberActive: {"subscriber_id": "sub-3", "group": "default", "channel": "orders"},
    errors.NotAuthorized: {"reason": "no credential", "action": "publish", "channel": "orders"},
    errors.ChannelConflict: {
        "channel": "orders",
        "setting": "ids",
        "existing": "channel",
        "requested": "publisher",
    },
    errors.ChannelInUse: {"channel": "orders", "members": 2, "unacked": 30, "dead_letters": 1},
    errors.FaultInjectionDisabled: {"call": "kill_queues"},
    errors.QueueFull: {
        "channel": "orders",
        "capacity": 10,
        "accepted": 3,
        "refused": 2,
        "refused_ids": ["e4", "e5"],
        "duplicates": ["e1"],
        "retry_after_s": 0.25,
        "limit": "events",
    },
    errors.LimitReached: {"resource": "channels", "limit": 1000, "where": "broker b1"},
    errors.BrokerUnavailable: {"what": "name server", "reason": "not reachable"},
    errors.ProcessingTimeout: {
        "channel": "orders",
        "publisher_id": "PUB",
        "timeout_s": 30.0,
        "outstanding": 12,
        "queued": 9,
        "in_flight": 3,
        "dead_letters": 2,
        "unserved": {},
    },
    errors.StoreError: {"path": "/data/c.db", "reason": "database is locked"},
    errors.LeaseLost: {"channel": "orders", "what": "channel orders"},
}


def test_samples_cover_every_error_class() -> None:
    assert set(SAMPLES) == set(ALL_ERRORS)
    assert len(set(ALL_ERRORS)) == len(ALL_ERRORS)
    assert all(issubclass(cls, ChannelError) for cls in ALL_ERRORS)


def test_tree_branches() -> None:
    assert issubclass(errors.InvalidEvent, errors.ClientError)
    assert issubclass(errors.QueueFull, errors.CapacityError)
    assert issubclass(errors.BrokerUnavailable, errors.TransportError)
    assert not issubclass(errors.TransportError, ConnectionError)  # no shadowed builtin
    assert issubclass(errors.ProcessingTimeout, TimeoutError)  # a builtin's meaning, kept


def test_processing_timeout_says_what_is_left_and_why() -> None:
    err = errors.ProcessingTimeout("orders", "PUB", 30.0, 9, 3, 2)
    assert str(err) == (
        "12 events of publisher 'PUB' on 'orders' not processed after 30 s "
        "(9 queued, 3 in flight); 2 dead-lettered"
    )
    idle = errors.ProcessingTimeout("orders", "PUB", 1.5, 4, 0)
    assert str(idle).endswith("(4 queued, 0 in flight); none in flight: is a subscriber running?")
    unserved = errors.ProcessingTimeout("orders", "PUB", 1.5, 4, 0, 0, {"default": 4})
    assert "queued in groups with no subscriber: 'default' (4)." in str(unserved)
    assert unserved.unserved == {"default": 4}


def test_queue_full_message_and_attributes() -> None:
    err = SAMPLES[errors.QueueFull]()
    assert err.message == str(err)
    assert "3 accepted, 2 refused" in err.message
    assert "0.25" in err.message


def test_queue_full_says_which_limit_refused() -> None:
    by_count = errors.QueueFull("orders", 10, 3, ["e4"])
    by_bytes = errors.QueueFull("orders", 4096, 3, ["e4"], limit="bytes")
    assert "(10 unacknowledged events)" in str(by_count)
    assert "(4096 bytes queued)" in str(by_bytes)
    assert (by_bytes.limit, by_bytes.capacity) == ("bytes", 4096)


def test_limit_reached_is_a_capacity_error_with_one_line() -> None:
    err = errors.LimitReached("members", 5, "channel orders")
    assert isinstance(err, errors.CapacityError)
    assert str(err) == "channel orders has reached its limit of 5 members"


def test_invalid_event_message_names_the_index() -> None:
    assert str(errors.InvalidEvent("id", "is required", 2)) == "event #2: id: is required"
    assert str(errors.InvalidEvent("id", "is required")) == "id: is required"


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
def test_error_survives_the_msgpack_serializer(cls: type[ChannelError]) -> None:
    register_errors()
    serializer = Pyro5.serializers.serializers[SERIALIZER]
    original = SAMPLES[cls]()
    original._pyroTraceback = ["Traceback (most recent call last):\n", "remote\n"]  # as a daemon
    copy = serializer.loads(serializer.dumps(original))
    assert type(copy) is cls
    assert copy.args == original.args
    assert str(copy) == str(original)
    assert copy.message == original.message
    assert vars(copy) == vars(original)
    for name, value in EXPECTED_ATTRIBUTES.get(cls, {}).items():
        assert getattr(copy, name) == value


def test_register_errors_is_idempotent() -> None:
    register_errors()
    register_errors()
    serializer = Pyro5.serializers.serializers[SERIALIZER]
    copy = serializer.loads(serializer.dumps(errors.UnknownChannel("c")))
    assert type(copy) is errors.UnknownChannel
    assert copy.channel == "c"


@Pyro5.api.expose
class FullChannel:
    def publish(self, batch: list) -> int:
        raise QueueFull("orders", 2, 1, [ev["id"] for ev in batch[1:]], retry_after_s=0.75)


def test_queue_full_round_trip_through_a_real_daemon() -> None:
    daemon = Pyro5.api.Daemon(host="127.0.0.1", port=0)
    uri = daemon.register(FullChannel())
    ready = threading.Event()

    def serve() -> None:
        ready.set()
        daemon.requestLoop()

    thread = threading.Thread(target=serve, name="test-daemon", daemon=True)
    thread.start()
    try:
        assert ready.wait(5)
        with make_proxy(uri, 5, NO_TOKEN) as proxy:
            assert proxy._pyroSerializer == "msgpack"
            assert proxy._pyroTimeout == 5
            with pytest.raises(QueueFull) as info:
                proxy.publish([{"id": "a"}, {"id": "b"}, {"id": "c"}])
    finally:
        daemon.shutdown()
        thread.join(5)
    err = info.value
    assert type(err) is QueueFull
    assert (err.channel, err.capacity, err.accepted) == ("orders", 2, 1)
    assert err.refused_ids == ["b", "c"]
    assert err.refused == 2
    assert err.retry_after_s == 0.75
    assert "retry in 0.75 s" in str(err)
    assert not thread.is_alive()


# -- names --------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["a", "orders", "A.b_c-9", "x" * 128])
def test_check_name_accepts(value: str) -> None:
    assert check_name("channel", value) == value


@pytest.mark.parametrize(
    "value", ["", "x" * 129, "with space", "a/b", "ü", "\nabc", None, 7, b"orders"]
)
def test_check_name_rejects(value: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_name("channel", value)
    assert info.value.argument == "channel"


def test_check_name_rejects_trailing_newline() -> None:
    # A name becomes part of a name-server entry; "orders\n" must not pass as "orders".
    with pytest.raises(InvalidArgument):
        check_name("group", "orders\n")


def test_name_server_names() -> None:
    assert channel_ns_name("orders") == "pubsub.channel.orders"
    assert broker_ns_name("b1") == "pubsub.broker.b1"


@Pyro5.api.expose
class Faulty:
    def typed(self) -> None:
        raise UnknownChannel("orders")

    def bug(self) -> None:
        raise RuntimeError("a bug in the service")

    def unknown_name(self) -> None:
        raise Pyro5.errors.NamingError("unknown name: pubsub.channel.x")


class _Hardened(HardenedDaemon, Pyro5.server.Daemon):
    """A daemon as every daemon here is made (the lobby, strict calls, typed refusals)."""


def test_a_caller_gets_the_error_and_never_the_servers_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    daemon = _Hardened(host="127.0.0.1", port=0)
    uri = daemon.register(Faulty())
    loop = threading.Thread(target=daemon.requestLoop, name="test-daemon", daemon=True)
    loop.start()
    try:
        with make_proxy(uri, 5, NO_TOKEN) as proxy:
            with pytest.raises(UnknownChannel) as typed:
                proxy.typed()
            with (
                caplog.at_level(logging.ERROR, logger="channel_server.transport"),
                pytest.raises(Pyro5.errors.NamingError),
            ):
                proxy.unknown_name()  # an answer, not a bug: no traceback logged
            with (
                caplog.at_level(logging.ERROR, logger="channel_server.transport"),
                pytest.raises(RuntimeError, match="a bug in the service") as bug,
            ):
                proxy.bug()
    finally:
        daemon.shutdown()
        loop.join(5)
    for raised in (typed.value, bug.value):
        assert not getattr(raised, "_pyroTraceback", None)  # no file, line or code of ours
    logged = [r.getMessage() for r in caplog.records]
    assert any("a call failed" in m and "test_errors_wire.py" in m for m in logged), logged
    assert not any("unknown name" in m for m in logged), logged
