"""Names, addresses and patterns that broker, clients and the core agree on.

Kept apart from :mod:`channel_server.wire` so that the pure core and the state files can
use them without loading Pyro5: this module imports nothing but :mod:`re` and the error
tree. ``wire`` re-exports every name here for its importers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from channel_server.errors import InvalidArgument

DEFAULT_HOST = "127.0.0.1"
DEFAULT_NS_PORT = 9090
NS_OBJECT = "Pyro.NameServer"
NS_PREFIX = "pubsub."
"""What every name-server entry of this service starts with."""
NS_CHANNEL_PREFIX = NS_PREFIX + "channel."
NS_BROKER_PREFIX = NS_PREFIX + "broker."
BROKER_TAG_PREFIX = "broker:"
IDS_TAG_PREFIX = "ids:"
"""A channel's name-server tag that says its id scope (``ids:publisher``, ``ids:channel``)."""
KIND_TAG_PREFIX = "kind:"
"""A channel's name-server tag that says its kind (``kind:queue``, ``kind:topic``)."""
DEFAULT_GROUP = "default"
NAME_PATTERN = r"[A-Za-z0-9._-]{1,128}"
"""Matched against the whole string (fullmatch)."""
_NAME_RE = re.compile(NAME_PATTERN)


def channel_ns_name(channel: str) -> str:
    return NS_CHANNEL_PREFIX + channel


def broker_ns_name(broker_id: str) -> str:
    return NS_BROKER_PREFIX + broker_id


def broker_tag(tags: Iterable[str]) -> str | None:
    """The broker id in a channel's name-server tags (``broker:<id>``), if any."""
    return _tag(tags, BROKER_TAG_PREFIX)


def id_scope_tag(tags: Iterable[str]) -> str | None:
    """The id scope in a channel's name-server tags (``ids:<scope>``), if any."""
    return _tag(tags, IDS_TAG_PREFIX)


def _tag(tags: Iterable[str], prefix: str) -> str | None:
    return next((t[len(prefix) :] for t in tags if t.startswith(prefix)), None)


def check_name(kind: str, value: object) -> str:
    """Validate a channel, group, broker or subscriber name at the RPC boundary."""
    if type(value) is not str or not _NAME_RE.fullmatch(value):
        raise InvalidArgument(kind, "must be 1-128 characters of [A-Za-z0-9._-]")
    return value
