"""Validation of RPC arguments other than events (those are in :mod:`events`).

Every exposed method checks its arguments here before taking a lock, and refuses bad ones
with :class:`InvalidArgument` naming the argument and the reason.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from itertools import repeat
from typing import Any

import Pyro5.core
import Pyro5.errors

from channel_server.config import ChannelConfig
from channel_server.errors import InvalidArgument
from channel_server.events import MAX_UID_CHARS
from channel_server.payloads import NOT_UTF8, is_utf8
from channel_server.wire import check_name

__all__ = [
    "all_uids",
    "check_acks",
    "check_callback",
    "check_callback_host",
    "check_flag",
    "check_id_list",
    "check_last_uid",
    "check_name",
    "check_prefetch",
    "check_secret",
    "check_seq",
]
MAX_SEQ = 2**63 - 1
MAX_ERROR_CHARS = 1000
"""A nack's error text is cut to this length (it is logged and kept with dead letters)."""


ANY_HOST = "*"
"""In the callback hosts allow-list: a callback may name any host."""
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
"""The callback hosts that mean "this machine" (another loopback address does not)."""


def check_callback(callback: Any) -> str:
    if isinstance(callback, Pyro5.core.URI):
        return str(callback)
    if type(callback) is not str:
        raise InvalidArgument("callback", "must be a PYRO: URI string")
    if not is_utf8(callback):
        raise InvalidArgument("callback", NOT_UTF8)
    try:
        uri = Pyro5.core.URI(callback)
    except Pyro5.errors.PyroError as exc:
        raise InvalidArgument("callback", f"not a Pyro URI: {exc}") from None
    if uri.protocol != "PYRO":
        raise InvalidArgument("callback", "must be a direct PYRO: URI")
    return callback


def check_callback_host(
    callback: str, caller: Any, allowed: Collection[str], local: Any = None
) -> None:
    """A push subscriber's callback must name the host its subscribe call came from, or
    one in ``allowed`` ("*": any), so that nobody can make the broker connect to a third
    party and speak Pyro5 with it. ``caller``: the (host, port, ...) of the connection the
    call came through, None for an in-process call (not checked); ``local``: the broker's
    end of it. A callback at this machine (``LOOPBACK``) is the caller's own when the caller
    is on the broker's machine: it connected over loopback, or from the broker's own
    address. Other host names are not resolved (a lookup could hang the call): allow them
    by name."""
    if caller is None or ANY_HOST in allowed:
        return
    uri = Pyro5.core.URI(callback)
    host = uri.host or f"unix socket {uri.sockname}"
    if uri.host is not None and (
        _same_host(uri.host, caller[0], local[0] if local else None)
        or _normal(uri.host) in {_normal(h) for h in allowed}
    ):
        return
    raise InvalidArgument(
        "callback",
        f"host {host} is not the address the subscriber connected from ({caller[0]}) "
        "nor in the broker's --callback-hosts",
    )


def _normal(host: str) -> str:
    """A host as compared: an IP address in its canonical form, a name in lower case."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host.lower()
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def _same_host(host: str, caller_host: str, local_host: str | None) -> bool:
    callback, caller = _normal(host), _normal(caller_host)
    if callback == caller:
        return True
    if callback not in LOOPBACK:
        return False
    return ipaddress.ip_address(caller).is_loopback or caller == _normal(local_host or "")


def check_prefetch(prefetch: Any, config: ChannelConfig) -> int:
    if prefetch is None:
        return config.default_prefetch
    if type(prefetch) is not int or not 1 <= prefetch <= config.max_prefetch:
        raise InvalidArgument("prefetch", f"must be an integer 1-{config.max_prefetch}")
    return prefetch


MAX_SECRET_CHARS = 256


def check_secret(secret: Any) -> str:
    """A push subscriber's callback secret: the broker presents it to the callback."""
    if type(secret) is not str or not 16 <= len(secret) <= MAX_SECRET_CHARS:
        raise InvalidArgument("callback_secret", "must be a string of 16-256 characters")
    if not is_utf8(secret):
        raise InvalidArgument("callback_secret", NOT_UTF8)
    return secret


def check_flag(argument: str, value: Any) -> bool:
    """A yes/no argument: a real boolean, not something that happens to be truthy."""
    if type(value) is not bool:
        raise InvalidArgument(argument, "must be true or false")
    return value


def check_seq(argument: str, value: Any) -> int:
    if type(value) is not int or not 0 <= value <= MAX_SEQ:
        raise InvalidArgument(argument, "must be a non-negative integer")
    return value


A_UID = f"each a UTF-8 string of 1-{MAX_UID_CHARS} characters: publisher_id/id"


def is_text(value: Any, max_chars: int = MAX_UID_CHARS) -> bool:
    """A non-empty UTF-8 string of at most ``max_chars`` characters."""
    return type(value) is str and 0 < len(value) <= max_chars and is_utf8(value)


def _is_uid(value: Any) -> bool:
    """Shaped like a uid (``publisher_id/id``); one that names no event matches nothing. A
    bare id is refused, not ignored: a client that acks by id would otherwise be sent the
    same event again for ever."""
    return is_text(value) and value.find("/") > 0


def all_uids(values: list[Any]) -> bool:
    """Whether every value is shaped like a uid (:func:`_is_uid`). An ack names up to a
    few hundred uids: a list of plain ASCII strings is checked by passes in C (type, ASCII,
    length, the ``/``) instead of a Python call per uid; anything else goes one by one."""
    if not values:
        return True
    if set(map(type, values)) != {str} or not all(map(str.isascii, values)):
        return all(map(_is_uid, values))
    return max(map(len, values)) <= MAX_UID_CHARS and min(map(str.find, values, repeat("/"))) > 0


def check_acks(acked: Any, nacked: Any, limit: int) -> tuple[list[str], dict[str, str]]:
    """An ack message's event uids (at most ``limit`` of each) and nack errors."""
    if not isinstance(acked, list) or len(acked) > limit or not all_uids(acked):
        raise InvalidArgument("acked", f"must be a list of at most {limit} event uids ({A_UID})")
    if not isinstance(nacked, dict) or len(nacked) > limit:
        raise InvalidArgument("nacked", f"must be a map of at most {limit} event uids to errors")
    errors = {}
    for uid, error in nacked.items():
        if not _is_uid(uid) or type(error) is not str or not is_utf8(error):
            raise InvalidArgument("nacked", f"must map event uids ({A_UID}) to UTF-8 error strings")
        errors[uid] = error[:MAX_ERROR_CHARS]
    return acked, errors


def check_returned(returned: Any, limit: int) -> list[str]:
    """Events a subscriber gives back unhandled (an earlier event of their partition
    failed): at most ``limit`` uids."""
    if returned is None:
        return []
    if not isinstance(returned, list) or len(returned) > limit or not all_uids(returned):
        raise InvalidArgument("returned", f"must be a list of at most {limit} event uids ({A_UID})")
    return returned


def check_answer(answer: Any, limit: int) -> tuple[int, int, list[str], dict[str, str], list[str]]:
    """The acks a subscriber put in its reply to a push: ``from_seq``, ``through_seq``,
    ``acked``, ``nacked`` and ``returned`` as an ack message has them (its checks, these
    keys only; ``returned`` only when some are)."""
    if not isinstance(answer, dict) or not _ANSWER_KEYS <= set(answer) <= _ANSWER_KEYS_ALL:
        raise InvalidArgument(
            "acks", "must be a map of from_seq, through_seq, acked, nacked and returned"
        )
    acked, nacked = check_acks(answer["acked"], answer["nacked"], limit)
    returned = check_returned(answer.get("returned"), limit)
    from_seq = check_seq("from_seq", answer["from_seq"])
    return from_seq, check_seq("through_seq", answer["through_seq"]), acked, nacked, returned


_ANSWER_KEYS = {"from_seq", "through_seq", "acked", "nacked"}
_ANSWER_KEYS_ALL = _ANSWER_KEYS | {"returned"}


def check_last_uid(last_uid: Any) -> str | None:
    if last_uid is not None and not _is_uid(last_uid):
        raise InvalidArgument("last_uid", f"must be an event uid ({A_UID}) or None")
    return last_uid


def check_id_list(argument: str, ids: Any) -> list[str] | None:
    """Event ids or uids (``publisher_id/id``), or None."""
    if ids is not None and (not isinstance(ids, list) or not all(map(is_text, ids))):
        raise InvalidArgument(argument, "must be a list of event ids or uids (UTF-8 strings)")
    return ids
