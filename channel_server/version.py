"""This installation's version, for ``--version`` and a broker's start line (a module of
its own: importlib.metadata loads sockets, which the pure core must not)."""

import importlib.metadata

from channel_server import __version__


def installed_version() -> str:
    """The installed distribution's version (the package's own when run from a checkout)."""
    try:
        return importlib.metadata.version("pubsub-channels")
    except importlib.metadata.PackageNotFoundError:
        return __version__
