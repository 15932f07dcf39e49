"""Subscriber client library and CLI."""

from subscriber.client import Subscriber
from subscriber.pull import PullClient

__all__ = ["PullClient", "Subscriber"]
