"""RPC arguments other than events: strings must be valid UTF-8, and a push subscriber's
callback may only name the host its subscribe call came from (or an allowed one)."""

from __future__ import annotations

import pytest

from channel_server import boundary
from channel_server.errors import InvalidArgument
from subscriber.client import nack_text

POISON = "poison\udc80"
SECRET = "s" * 16


def refused(argument: str, call, *args: object) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        call(*args)
    assert info.value.argument == argument
    return info.value


# -- UTF-8 ----------------------------------------------------------------------------------
def test_ack_ids_and_nack_errors_must_be_utf8() -> None:
    good = (["p/é-1"], {"p/e2": "boom ✓"})
    assert boundary.check_acks(*good, 10) == good
    refused("acked", boundary.check_acks, [f"p/{POISON}"], {}, 10)
    refused("nacked", boundary.check_acks, [], {f"p/{POISON}": "boom"}, 10)
    err = refused("nacked", boundary.check_acks, [], {"p/e1": f"boom {POISON}"}, 10)
    assert "UTF-8" in err.reason


def test_a_push_reply_may_name_events_returned_unhandled() -> None:
    answer = {"from_seq": 3, "through_seq": 5, "acked": ["p/a"], "nacked": {"p/b": "x"}}
    assert boundary.check_answer(answer, 10) == (3, 5, ["p/a"], {"p/b": "x"}, [])
    returned = answer | {"returned": ["p/c"]}
    assert boundary.check_answer(returned, 10)[4] == ["p/c"]
    refused("acks", boundary.check_answer, answer | {"other": []}, 10)
    refused("returned", boundary.check_answer, answer | {"returned": ["c"]}, 10)
    refused("returned", boundary.check_returned, ["p/c"] * 11, 10)
    refused("returned", boundary.check_returned, "p/c", 10)
    assert boundary.check_returned(None, 10) == []


@pytest.mark.parametrize("bare", ["e1", "/e1"])
def test_acks_name_events_by_uid_not_by_bare_id(bare: str) -> None:
    err = refused("acked", boundary.check_acks, [bare], {}, 10)
    assert "publisher_id/id" in err.reason
    refused("last_uid", boundary.check_last_uid, bare)


class Text(str):
    pass


UID_LIKE = ["p/e", "p/é", "p/", "/e", "e", "", "p//e", "p/" + "e" * 383, "p/" + "e" * 384]
UID_LIKE += [POISON, f"p/{POISON}", Text("p/e"), b"p/e", None, 7, ["p/e"]]


@pytest.mark.parametrize("odd", UID_LIKE, ids=repr)
def test_a_list_of_uids_is_judged_as_each_uid_is(odd: object) -> None:
    """all_uids (passes in C over plain ASCII strings) says what _is_uid says of each."""
    for values in ([odd], ["p/1", odd], [odd, "p/2", "p/3"]):
        assert boundary.all_uids(values) == all(boundary._is_uid(v) for v in values)
    assert boundary.all_uids([])


def test_other_ids_secrets_and_callbacks_must_be_utf8() -> None:
    refused("last_uid", boundary.check_last_uid, POISON)
    refused("ids", boundary.check_id_list, "ids", ["ok", POISON])
    refused("callback_secret", boundary.check_secret, SECRET + POISON)
    refused("callback", boundary.check_callback, f"PYRO:obj@{POISON}:5000")
    assert boundary.check_secret(SECRET) == SECRET


# -- callback hosts ---------------------------------------------------------------------
LOCAL = ("127.0.0.1", 40000)
LAN = ("10.0.0.5", 9999)
"""The broker's end of a connection to its address on a LAN."""


@pytest.mark.parametrize(
    ("callback", "caller", "allowed", "local"),
    [
        ("PYRO:sub@127.0.0.1:5000", LOCAL, (), LOCAL),
        ("PYRO:sub@localhost:5000", LOCAL, (), LOCAL),
        ("PYRO:sub@[::1]:5000", ("::1", 40000, 0, 0), (), None),
        ("PYRO:sub@127.0.0.1:5000", ("::ffff:127.0.0.1", 40000, 0, 0), (), None),
        ("PYRO:sub@10.1.2.3:5000", ("10.1.2.3", 40000), (), LAN),
        ("PYRO:sub@127.0.0.1:5000", ("10.0.0.5", 40000), (), LAN),  # a local subscriber
        ("PYRO:sub@localhost:5000", ("10.0.0.5", 40000), (), LAN),
        ("PYRO:sub@10.9.9.9:5000", LOCAL, ("10.9.9.9",), LOCAL),
        ("PYRO:sub@Worker.Example:5000", LOCAL, ("worker.example", "other"), LOCAL),
        ("PYRO:sub@anything.example:5000", LOCAL, ("*",), LOCAL),
        ("PYRO:sub@10.9.9.9:5000", None, (), None),  # in-process: no connection to compare
    ],
    ids=[
        "same-ip",
        "localhost",
        "ipv6",
        "v4-mapped",
        "remote-same",
        "loopback-via-lan",
        "localhost-via-lan",
        "allowed-ip",
        "allowed-name",
        "any",
        "in-process",
    ],
)
def test_callback_host_accepted(
    callback: str, caller: object, allowed: tuple, local: object
) -> None:
    boundary.check_callback_host(callback, caller, allowed, local)


@pytest.mark.parametrize(
    ("callback", "caller", "allowed", "local"),
    [
        ("PYRO:sub@127.0.0.2:5000", LOCAL, (), LOCAL),
        ("PYRO:sub@10.9.9.9:5000", LOCAL, ("10.9.9.8",), LOCAL),
        ("PYRO:sub@localhost:5000", ("10.1.2.3", 40000), (), LAN),
        ("PYRO:sub@127.0.0.1:5000", ("10.1.2.3", 40000), (), LAN),
        ("PYRO:sub@worker.example:5000", LOCAL, (), LOCAL),  # names are not resolved
        ("PYRO:sub@./u:/run/other.sock", LOCAL, (), LOCAL),  # a unix socket of the broker
    ],
    ids=["other-ip", "not-allowed", "remote-localhost", "remote-loopback", "name", "unix"],
)
def test_callback_host_refused(
    callback: str, caller: object, allowed: tuple, local: object
) -> None:
    err = refused("callback", boundary.check_callback_host, callback, caller, allowed, local)
    assert "--callback-hosts" in err.reason
    assert "\n" not in str(err)


def test_a_subscribers_nack_text_always_passes_the_ack_check() -> None:
    # A handler failing on an undecodable file name: its text has a lone surrogate.
    text = nack_text(FileNotFoundError(f"no such file: {POISON}"))
    assert text == "FileNotFoundError: no such file: poison\\udc80"
    assert boundary.check_acks([], {"p/e1": text}, 10) == ([], {"p/e1": text})
