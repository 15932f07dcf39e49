"""Subscriber client library and CLI."""

from subscriber.client import Subscriber

__all__ = ["Subscriber"]
