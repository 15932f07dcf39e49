"""Publisher client library and CLI (``from publisher import Publisher``; docs/api.md)."""

from publisher.client import DEFAULT_PARTITIONS, Publisher, PublishTotals, StateDir
from publisher.topics import Putter

__all__ = ["DEFAULT_PARTITIONS", "PublishTotals", "Publisher", "Putter", "StateDir"]
