"""A broker's entries in a name server of another process, put back when they are gone.

A name server keeps its names in memory. Restarted, it knows none of this broker's
channels, and every client that looks one up is told the channel is unknown until the
broker restarts too; so is a broker using another broker's embedded name server when
that broker restarts. So a broker whose name server runs elsewhere lists its entries
every ``names_check_s`` and registers the missing ones again.

Only a missing name is registered, and with a ``safe`` registration: an entry there,
whoever put it (a broker that took a channel over, a race with this check), is left
alone. A channel dropped while its name went back in has it removed again at once.

The checks run on a thread of their own: the name server may be slow or away, and the
dispatch pool must never wait for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import Pyro5.errors

from channel_server.errors import ChannelError
from channel_server.log_throttle import Throttle
from channel_server.names import NS_PREFIX
from channel_server.nameservice import NameService
from channel_server.rounds import Rounds

log = logging.getLogger(__name__)
_throttled = Throttle(log)


@dataclass(frozen=True)
class Entry:
    """A name-server entry as this broker registers it."""

    uri: str
    tags: frozenset[str]


def put_back(names: NameService, wanted: Mapping[str, Entry]) -> list[str]:
    """Register the names of ``wanted`` the name server lacks (``safe``: one registered
    meanwhile stays); returns those registered."""
    listed = names.list(NS_PREFIX)  # the broker's and its channels'
    registered = []
    for name, entry in wanted.items():
        if name in listed:
            continue
        try:
            names.register(name, entry.uri, True, set(entry.tags))
        except Pyro5.errors.NamingError:
            continue  # registered since the listing: by whoever did, it stays
        registered.append(name)
    return registered


class NamesKeeper:
    """Checks a broker's entries every ``interval_s`` on its own thread, between
    :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        names: NameService,
        wanted: Callable[[], dict[str, Entry]],
        still_wanted: Callable[[list[str]], None],
        interval_s: float,
    ) -> None:
        """``wanted()``: this broker's entries now, by name; ``still_wanted(names)``:
        called with the names just registered again, to remove those of channels dropped
        meanwhile."""
        self._names = names
        self._wanted = wanted
        self._still_wanted = still_wanted
        self._away = False
        """The last check could not reach the name server (said once, and when it is back)."""
        self._rounds = Rounds("names", interval_s, self.check, "checking the names failed")

    def start(self) -> None:
        self._rounds.start()

    def stop(self, timeout_s: float) -> None:
        """End the checks: the one in hand finishes (waited for at most ``timeout_s``)."""
        self._rounds.stop(timeout_s)

    def check(self) -> list[str]:
        """One check: the missing names registered again (and returned)."""
        try:
            registered = put_back(self._names, self._wanted())
        except (ChannelError, Pyro5.errors.PyroError, OSError) as exc:
            self._away = True
            _throttled.warning(
                "away", "cannot check this broker's names in the name server: %s", exc
            )
            return []
        if self._away:
            self._away = False
            log.info("the name server answers again")
        if registered:
            log.warning(
                "the name server had lost %d of this broker's names (restarted?); "
                "registered again: %s",
                len(registered),
                ", ".join(registered),
            )
            self._still_wanted(registered)
        return registered
