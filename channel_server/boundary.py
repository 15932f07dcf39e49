"""Validation of RPC arguments other than events (those are in :mod:`events`).

Every exposed method checks its arguments here before taking a lock, and refuses bad ones
with :class:`InvalidArgument` naming the argument and the reason.
"""

from __future__ import annotations

from typing import Any

import Pyro5.core
import Pyro5.errors

from channel_server.config import ChannelConfig
from channel_server.errors import InvalidArgument
from channel_server.events import MAX_UID_CHARS
from channel_server.wire import check_name

__all__ = [
    "check_acks",
    "check_callback",
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


def check_callback(callback: Any) -> str:
    if isinstance(callback, Pyro5.core.URI):
        return str(callback)
    if type(callback) is not str:
        raise InvalidArgument("callback", "must be a PYRO: URI string")
    try:
        uri = Pyro5.core.URI(callback)
    except Pyro5.errors.PyroError as exc:
        raise InvalidArgument("callback", f"not a Pyro URI: {exc}") from None
    if uri.protocol != "PYRO":
        raise InvalidArgument("callback", "must be a direct PYRO: URI")
    return callback


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
    return secret


def check_seq(argument: str, value: Any) -> int:
    if type(value) is not int or not 0 <= value <= MAX_SEQ:
        raise InvalidArgument(argument, "must be a non-negative integer")
    return value


def _is_uid(value: Any) -> bool:
    """Shaped like a uid (``publisher_id/id``); one that names no event matches nothing."""
    return type(value) is str and 0 < len(value) <= MAX_UID_CHARS


def check_acks(acked: Any, nacked: Any, limit: int) -> tuple[list[str], dict[str, str]]:
    """An ack message's event uids (at most ``limit`` of each) and nack errors."""
    if not isinstance(acked, list) or len(acked) > limit or not all(map(_is_uid, acked)):
        raise InvalidArgument("acked", f"must be a list of at most {limit} event uids")
    if not isinstance(nacked, dict) or len(nacked) > limit:
        raise InvalidArgument("nacked", f"must be a map of at most {limit} event uids to errors")
    errors = {}
    for uid, error in nacked.items():
        if not _is_uid(uid) or type(error) is not str:
            raise InvalidArgument("nacked", "must map event uids to error strings")
        errors[uid] = error[:MAX_ERROR_CHARS]
    return acked, errors


def check_last_uid(last_uid: Any) -> str | None:
    if last_uid is not None and not _is_uid(last_uid):
        raise InvalidArgument("last_uid", "must be an event uid (publisher_id/id) or None")
    return last_uid


def check_id_list(argument: str, ids: Any) -> list[str] | None:
    """Event ids or uids (``publisher_id/id``), or None."""
    if ids is not None and (not isinstance(ids, list) or not all(map(_is_uid, ids))):
        raise InvalidArgument(argument, "must be a list of event ids or uids")
    return ids
