"""The backup queue: where accepted events live until every group has acknowledged them."""

from channel_server.store.base import ChannelRecord, MemberRecord, Store
from channel_server.store.memory import MemoryStore

__all__ = ["ChannelRecord", "MemberRecord", "MemoryStore", "Store"]
