"""Publisher client library and CLI."""

from publisher.client import Publisher, PublishTotals

__all__ = ["PublishTotals", "Publisher"]
