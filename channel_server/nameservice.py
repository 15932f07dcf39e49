"""Name server access for a process that serves: an existing one, or an embedded one.

The embedded name server authenticates like the broker (the same :class:`Access`): anyone
with a valid credential may look names up, only brokers may register or remove them, regex
listings are refused (a hostile pattern could stall it), and a user sees (in a listing, a
count or a lookup) only the channels it has a permission on. An existing name server must
authenticate too, or the broker refuses to use it unless told ``--insecure-name-server`` (a
stock ``pyro5-ns`` lets any local process rewrite every name).

Any thread may call a NameService: with an embedded name server it calls the in-process
object (which has its own lock); with a remote one it opens a proxy per call, because a
Pyro5 proxy belongs to the thread that made it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from contextlib import AbstractContextManager
from typing import Any

import Pyro5.api
import Pyro5.core
import Pyro5.errors
import Pyro5.nameserver

from channel_server import tls
from channel_server.access import Access
from channel_server.boundary import check_flag, is_text
from channel_server.credentials import Credential
from channel_server.daemon_loop import DaemonLoop
from channel_server.errors import BrokerUnavailable, InvalidArgument, NotAuthorized
from channel_server.strict_calls import checked_arity
from channel_server.transport import HardenedDaemon, bind_failure
from channel_server.wire import ANONYMOUS, NS_CHANNEL_PREFIX, locate_ns

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 5.0
NS_ANSWER_WAIT_S = 60.0
"""How long a starting broker waits for a name server that holds its port but does not
answer (frozen, or too busy) before it gives up."""
NS_LOOK_AGAIN_S = 1.0


@checked_arity
@Pyro5.api.expose
class GuardedNameServer:
    """Pyro5's NameServer behind the access rules (same methods, same answers)."""

    def __init__(self, inner: Pyro5.nameserver.NameServer, access: Access) -> None:
        self._inner = inner
        self._access = access

    def count(self) -> int:
        """The names the caller may see (a user's count leaves out others' channels)."""
        if self._access.current().broker:
            return self._inner.count()
        return len(self._visible(self._inner.list()))

    def ping(self) -> None:
        self._inner.ping()

    def lookup(self, name: str, return_metadata: bool = False) -> Any:
        """A channel's entry for a user with some permission on it; any other user is
        refused whether the channel exists or not, so a lookup tells it nothing."""
        name = _name("name", name)
        if name.startswith(NS_CHANNEL_PREFIX) and not self._access.current().broker:
            self._access.require_any(name[len(NS_CHANNEL_PREFIX) :])
        return self._inner.lookup(name, check_flag("return_metadata", return_metadata))

    def yplookup(self, meta_all: Any = None, meta_any: Any = None, return_metadata: bool = True):
        return self._visible(
            self._inner.yplookup(
                _metadata("meta_all", meta_all),
                _metadata("meta_any", meta_any),
                check_flag("return_metadata", return_metadata),
            )
        )

    def list(self, prefix: str | None = None, regex: str | None = None, return_metadata=False):
        if regex is not None:
            raise NotAuthorized("regex listings are refused; list by prefix")
        return self._visible(
            self._inner.list(
                prefix=_name("prefix", prefix, optional=True),
                return_metadata=check_flag("return_metadata", return_metadata),
            )
        )

    def _visible(self, listing: dict[str, Any]) -> dict[str, Any]:
        """A listing without the channels the caller has no permission on: a user learns
        the names of its channels only."""
        user = self._access.current()
        if user.broker:
            return listing
        return {
            name: value
            for name, value in listing.items()
            if not name.startswith(NS_CHANNEL_PREFIX)
            or user.allows_any(name[len(NS_CHANNEL_PREFIX) :])
        }

    def register(self, name: str, uri: Any, safe: bool = False, metadata: Any = None) -> None:
        self._access.require_broker(f"register {name!r:.80} in the name server")
        self._inner.register(
            _name("name", name),
            _uri(uri),
            check_flag("safe", safe),
            _metadata("metadata", metadata),
        )

    def set_metadata(self, name: str, metadata: Any) -> None:
        self._access.require_broker(f"change {name!r:.80} in the name server")
        self._inner.set_metadata(_name("name", name), _metadata("metadata", metadata))

    def remove(self, name: str | None = None, prefix: str | None = None, regex=None) -> int:
        self._access.require_broker("remove names from the name server")
        if regex is not None:
            raise NotAuthorized("regex removals are refused")
        return self._inner.remove(
            _name("name", name, optional=True), _name("prefix", prefix, optional=True)
        )


MAX_NS_NAME_CHARS = 512
"""Longer than any name this service registers (``pubsub.channel.`` and a channel name)."""


def _name(argument: str, value: Any, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not is_text(value, MAX_NS_NAME_CHARS):
        raise InvalidArgument(argument, f"must be a UTF-8 string of 1-{MAX_NS_NAME_CHARS} chars")
    return value


def _metadata(argument: str, value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, list | tuple | set) or not all(
        is_text(v, MAX_NS_NAME_CHARS) for v in value
    ):
        raise InvalidArgument(argument, "must be a list of strings")
    return set(value)


def _uri(value: Any) -> str:
    try:
        return str(Pyro5.core.URI(_name("uri", value)))
    except Pyro5.errors.PyroError as exc:
        raise InvalidArgument("uri", f"not a Pyro5 URI: {exc}") from None


class GuardedNameServerDaemon(HardenedDaemon, Pyro5.nameserver.NameServerDaemon):
    """Pyro5's name server daemon with the broker's gate and the guarded name server."""

    def __init__(self, host: str, port: int, access: Access) -> None:
        tls.from_environment(serving=True)
        super().__init__(host=host, port=port)
        self._access = access
        self.unregister(self.nameserver)
        self.guarded = GuardedNameServer(self.nameserver, access)
        self.register(self.guarded, Pyro5.core.NAMESERVER_NAME)

    def admit(self, conn: Any, data: Any) -> Any:
        return self._access.admit(conn, data)


class NameService:
    def __init__(self, host: str, port: int, credential: Credential) -> None:
        self.host, self.port = host, port
        self.embedded = False
        self._credential = credential
        self._ns_daemon: GuardedNameServerDaemon | None = None
        self.serving: DaemonLoop | None = None
        """The embedded name server's loop (None when it is another process's)."""

    @classmethod
    def connect_or_start(
        cls, host: str, port: int, access: Access, credential: Credential, insecure: bool = False
    ) -> NameService:
        """Use the name server at host:port, or start one there when none answers. An
        existing one that admits strangers is refused unless ``insecure``."""
        service = cls(host, port, credential)
        deadline = time.monotonic() + NS_ANSWER_WAIT_S
        while True:
            try:
                locate_ns(host, port, credential=ANONYMOUS)._pyroRelease()
            except NotAuthorized:
                locate_ns(host, port, credential=credential)._pyroRelease()  # ours?
                log.info("using the name server at %s:%d", host, port)
                return service
            except BrokerUnavailable as exc:
                if service._embedded_or_held(access, exc, deadline):
                    return service
                continue
            return service._open_to_anyone(insecure)

    def _open_to_anyone(self, insecure: bool) -> NameService:
        """A name server that admitted a stranger: refused unless ``insecure``."""
        where = f"{self.host}:{self.port}"
        if not insecure:
            raise NotAuthorized(
                f"the name server at {where} lets anyone change its names; run "
                "`python -m channel_server nameserver`, or pass --insecure-name-server"
            )
        log.warning("using the name server at %s, which does not authenticate", where)
        self._credential = ANONYMOUS  # it could prove no token: tell it none
        return self

    def _embedded_or_held(self, access: Access, why: Exception, deadline: float) -> bool:
        """No name server answered: start one here (True), or, when a process holds the
        port without answering (a name server frozen), wait and say so (False: look
        again), until ``deadline`` (BrokerUnavailable). Taking "no answer" for "nobody
        there" made a broker exit with "Address already in use" and leave its channels
        unserved (session 33's Jepsen probe)."""
        try:
            self._start_embedded(access)
            return True
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
        if time.monotonic() >= deadline:
            raise BrokerUnavailable(
                f"name server at {self.host}:{self.port}",
                f"a process holds its port but does not answer ({why})",
            )
        log.warning(
            "the name server at %s:%d does not answer (%s), though its port is held: "
            "waiting for it",
            self.host,
            self.port,
            why,
        )
        time.sleep(NS_LOOK_AGAIN_S)  # a frozen name server: nothing to wake us up
        return False

    def _start_embedded(self, access: Access) -> None:
        try:
            daemon = GuardedNameServerDaemon(self.host, self.port, access)
        except OSError as exc:
            raise bind_failure(exc, "name server", self.host, self.port) from exc
        self._ns_daemon = daemon
        self.port = daemon.sock.getsockname()[1]
        self.embedded = True
        self.serving = DaemonLoop(daemon, "nameserver")
        self.serving.start()
        log.info("started an embedded name server at %s:%d", self.host, self.port)

    def _server(self) -> AbstractContextManager[Any]:
        """The name server to call: the embedded one in-process (the broker itself: past
        the guard, whoever asked), or a proxy of the caller's own for the call."""
        if self._ns_daemon is not None:
            return contextlib.nullcontext(self._ns_daemon.nameserver)
        return locate_ns(self.host, self.port, credential=self._credential)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._server() as ns:
            return getattr(ns, method)(*args, **kwargs)

    def register(self, name: str, uri: str, safe: bool, metadata: set[str]) -> None:
        """Raises Pyro5.errors.NamingError when ``safe`` and the name is taken."""
        self._call("register", name, str(uri), safe=safe, metadata=metadata)

    def lookup(self, name: str) -> tuple[str, set[str]] | None:
        try:
            uri, meta = self._call("lookup", name, return_metadata=True)
        except Pyro5.errors.NamingError:
            return None
        return str(uri), set(meta)

    def list(self, prefix: str) -> dict[str, tuple[str, set[str]]]:
        entries = self._call("list", prefix=prefix, return_metadata=True)
        return {name: (str(uri), set(meta)) for name, (uri, meta) in entries.items()}

    def remove(self, *names: str) -> None:
        """Remove ``names`` over one connection: a name server that does not answer costs
        a stop one timeout, not one per channel (20 channels took 100 s, past what a
        supervisor waits before it kills, and the leases were released last)."""
        left = list(names)
        try:
            with self._server() as server:
                while left:
                    server.remove(left[0])
                    left.pop(0)
        except (Pyro5.errors.PyroError, BrokerUnavailable) as exc:
            log.warning(
                "could not remove %s from the name server: %s",
                left[0] if len(left) == 1 else f"{len(left)} names ({left[0]}, ...)",
                exc,
            )

    def close(self) -> None:
        if self.serving is not None:
            self.serving.stop(STOP_TIMEOUT_S)
            self.serving = self._ns_daemon = None
