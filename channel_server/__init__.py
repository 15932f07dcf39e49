"""The broker side of the event channel service.

Kept light on purpose: clients import :mod:`channel_server.wire` and must never pull in the
broker, its store or its threads.
"""

__version__ = "0.1.0"
