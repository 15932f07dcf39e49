"""The broker side of the event channel service.

Kept light on purpose: clients import :mod:`channel_server.wire` and must never pull in the
broker, its store or its threads.
"""

import importlib.metadata

__version__ = "0.1.0"


def installed_version() -> str:
    """This installation's version (the package's own when run from a checkout)."""
    try:
        return importlib.metadata.version("pubsub-channels")
    except importlib.metadata.PackageNotFoundError:
        return __version__
