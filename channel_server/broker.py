"""The broker: one Pyro5 daemon hosting many channels, published in the name server.

Threads: the daemon's request loop, the dispatch pool and, with a shared store, the lease
rounds (all owned here), and Pyro5 workers. The pool pushes for every channel, runs the
housekeeping round, which reschedules itself every ``housekeeping_s``, and restores the
channels the lease rounds take over. The table of channels
(:mod:`hosted`) has the broker lock, held for nothing but the table: the name server is
called outside it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from functools import partial
from typing import Any

import Pyro5.api
import Pyro5.errors
import Pyro5.server
from Pyro5.core import URI

from channel_server.access import Access
from channel_server.broker_service import BrokerDaemon, BrokerService, check_id_scope, check_kind
from channel_server.channel import EventChannel
from channel_server.claims import ChannelClaims
from channel_server.config import BrokerConfig
from channel_server.core.records import ChannelKind
from channel_server.cpu_pin import pinned_cpu
from channel_server.credentials import OWNER, Credential
from channel_server.daemon_loop import DaemonLoop
from channel_server.dispatch import DispatchPool
from channel_server.errors import (
    BrokerUnavailable,
    ChannelConflict,
    ChannelError,
    ChannelInUse,
    FaultInjectionDisabled,
    InvalidArgument,
    LimitReached,
    UnknownChannel,
)
from channel_server.events import IdScope
from channel_server.hosted import HostedChannels
from channel_server.lease_keeper import LeaseKeeper
from channel_server.log_throttle import Throttle
from channel_server.machine_cpu import MachineCpu
from channel_server.monitor.app import BrokerHandle
from channel_server.monitor.server import MonitorServer
from channel_server.names_keeper import Entry, NamesKeeper
from channel_server.nameservice import NameService
from channel_server.store import ChannelRecord, Store
from channel_server.store.leases import LeaseStore
from channel_server.strict_calls import CHANNEL_OBJECT_PREFIX
from channel_server.transport import bind_failure
from channel_server.version import installed_version
from channel_server.wire import (
    NS_CHANNEL_PREFIX,
    as_refusal,
    broker_ns_name,
    channel_ns_name,
    check_name,
    make_proxy,
    register_errors,
)

log = logging.getLogger(__name__)
BROKER_ID_CHECK_S = 2.0
"""How long a starting broker waits for a broker already registered with its id to answer
(one that does not is taken for gone)."""
STOP_TIMEOUT_S = 5.0
CREATE_WAIT_S = 30.0
"""Longest a create_channel waits for another call creating the same channel (a name-server
round trip and a store read of a channel the store does not hold yet: milliseconds)."""


class Broker:
    """Owns the daemon, the channels and the name-server registrations."""

    def __init__(self, config: BrokerConfig, store: Store, token: str, access: Access) -> None:
        """``token``: the local token (the broker connects with it to its name server);
        ``access``: who may call it."""
        self.config = config
        self.store = store
        self.access = access
        self._credential = Credential(OWNER, token)
        self._hosted = HostedChannels(config.max_channels, config.broker_id)
        self._daemon: Pyro5.server.Daemon | None = None
        self._serving: DaemonLoop | None = None
        self._pool = DispatchPool(config.push_threads, concurrency=config.push_concurrency)
        self._machine = MachineCpu(cpu=pinned_cpu())
        """How busy this machine's CPUs are, or the broker's one CPU when it is pinned
        (every channel's pushes ask)."""
        self._stopping = False
        self._registered = False
        """Its name is in the name server (a start refused before has none to remove: the
        name would be the live broker's of that id)."""
        self._refusals = Throttle(log)
        """Channels refused at the cap, logged at most every 10 s."""
        self.ns: NameService | None = None
        self.uri: str = ""
        self.monitor: MonitorServer | None = None
        """The HTTP monitor (``config.http``), started last and stopped first."""
        self.names_keeper: NamesKeeper | None = None
        """With a name server of another process: puts back the entries it lost."""
        self.leases: LeaseKeeper | None = None
        """With a store shared by several brokers: the channel leases this one holds."""
        if isinstance(store, LeaseStore):
            self.leases = LeaseKeeper(store, config.lease_s, self._take_over, self._drop)
        # Guards _taking_over: the channels a take-over is restoring (on the pool), so
        #   the lease rounds, which go on meanwhile, do not start another.
        self._taking_over_lock = threading.Lock()
        self._taking_over: set[str] = set()
        self._claims = ChannelClaims(self._names, config.broker_id, self.leases is not None)

    def _names(self) -> NameService:
        """The name server, connected by ``start``."""
        if self.ns is None:
            raise BrokerUnavailable(f"broker {self.config.broker_id}", "not started")
        return self.ns

    def _served(self) -> Pyro5.server.Daemon:
        """The broker's daemon, made by ``start``."""
        if self._daemon is None:
            raise BrokerUnavailable(f"broker {self.config.broker_id}", "not started")
        return self._daemon

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> None:
        register_errors()
        self._pool.start()
        sys.setswitchinterval(self.config.switch_interval_s)
        self.config.transport.apply()
        self.ns = NameService.connect_or_start(
            self.config.ns_host,
            self.config.ns_port,
            self.access,
            self._credential,
            self.config.insecure_name_server,
        )
        # Pyro5's NAT address is what its URIs name; natport 0: the port it binds to
        nat = {"nathost": self.config.advertise, "natport": 0} if self.config.advertise else {}
        try:
            self._daemon = BrokerDaemon(
                self.access.admit,
                self._client_gone,
                host=self.config.host,
                port=self.config.port,
                **nat,
            )
        except OSError as exc:
            raise bind_failure(exc, "broker", self.config.host, self.config.port) from exc
        self._serving = DaemonLoop(self._daemon, "broker-daemon")
        service = BrokerService(self)
        self.uri = str(
            self._daemon.register(service, objectId=broker_ns_name(self.config.broker_id))
        )
        self._check_id_is_ours()
        self.ns.register(broker_ns_name(self.config.broker_id), self.uri, False, {"broker"})
        self._registered = True
        if self.leases is not None:
            self.leases.start()
        for record in self.store.channels():
            if self.leases is not None and not self.leases.take(record.name):
                log.info("channel %s is served by another broker; standing by", record.name)
                continue
            try:
                self.create_channel(record.name, record.kind, record.id_scope, restoring=True)
            except BrokerUnavailable as exc:  # its lease lost while it was restored
                log.warning("channel %s is not served here: %s", record.name, exc)
        for name in self.config.channels:
            self.create_channel(name)
            self._note_kept_scope(name)
        self._serving.start()
        self._pool.submit(self._housekeep, self.config.housekeeping_s)
        if not self.ns.embedded:
            self.names_keeper = NamesKeeper(
                self.ns, self._entries, self._unless_dropped, self.config.names_check_s
            )
            self.names_keeper.start()
        if self.config.http is not None:
            handle = BrokerHandle(self.config.broker_id, self.access, self.channel_table)
            self.monitor = MonitorServer(self.config.http, handle)
            self.monitor.start()
        log.info(
            "broker %s (pubsub-channels %s) serving at %s",
            self.config.broker_id,
            installed_version(),
            self.uri,
        )

    def _client_gone(self, conn: Any) -> None:
        for channel in self._hosted.all():
            channel.connection_closed(id(conn))

    def _housekeep(self) -> None:
        """Every channel's housekeeping round, then the next one (while serving)."""
        for channel in self._hosted.all():
            try:
                channel.housekeep()
            except Exception:
                log.exception("%s: housekeeping failed", channel.name)
        if not self._stopping:
            self._pool.submit(self._housekeep, self.config.housekeeping_s)

    def _entries(self) -> dict[str, Entry]:
        """This broker's entries in the name server: its own and its channels'."""
        entries = {broker_ns_name(self.config.broker_id): Entry(self.uri, frozenset({"broker"}))}
        daemon = self._served()
        for channel in self._hosted.all():
            tags = self._claims.tags(channel.kind, channel.id_scope)
            entries[channel_ns_name(channel.name)] = Entry(str(daemon.uriFor(channel)), tags)
        return entries

    def _unless_dropped(self, registered: list[str]) -> None:
        """Of the names the keeper just put back, remove those of channels dropped since it
        listed them (a lost lease: the new owner's entry must win)."""
        hosted = {channel_ns_name(name) for name in self._hosted.names()}
        for ns_name in registered:
            if ns_name.startswith(NS_CHANNEL_PREFIX) and ns_name not in hosted:
                self._claims.give_up_if_ours(ns_name[len(NS_CHANNEL_PREFIX) :])

    def _take_over(self, name: str) -> None:
        """Host a channel of the database whose owner stopped renewing its lease: restored
        on the pool, once at a time (the lease rounds must not wait for a restore)."""
        with self._taking_over_lock:
            if name in self._taking_over:
                return
            self._taking_over.add(name)
        self._pool.submit(partial(self._restore_taken, name))

    def _restore_taken(self, name: str) -> None:
        try:
            record = next((r for r in self.store.channels() if r.name == name), None)
            if record is not None and not self._stopping:
                self.create_channel(record.name, record.kind, record.id_scope, restoring=True)
        except (ChannelError, OSError) as exc:
            log.warning("could not take over channel %s: %s", name, exc)
        finally:
            with self._taking_over_lock:
                self._taking_over.discard(name)

    def _drop(self, name: str, why: str) -> None:
        """Stop serving a channel whose lease was lost: out of the table and the daemon,
        its name-server entry removed while it still names this broker."""
        channel = self._hosted.remove(name)
        if channel is None:
            return
        log.warning("channel %s: no longer served here: %s", name, why)
        self._discard(channel)
        if self.ns is not None:
            self._claims.give_up_if_ours(name)

    def _check_id_is_ours(self) -> None:
        """InvalidArgument when another live broker has this broker id: the name server
        kept only the last one's entry, and ``list`` and placement took the two for one
        (session 33's operator probe). An entry whose broker does not answer (it crashed,
        or it is this one, restarted on the same port) is taken over."""
        assert self.ns is not None
        found = self.ns.lookup(broker_ns_name(self.config.broker_id))
        if found is None or URI(found[0]).location == URI(self.uri).location:
            return
        try:
            with make_proxy(found[0], BROKER_ID_CHECK_S, self._credential) as other:
                other._pyroBind()
        except Pyro5.errors.CommunicationError as exc:
            if as_refusal(exc) is None:
                return  # nobody there
        raise InvalidArgument(
            "--broker-id",
            f"{self.config.broker_id} is the id of another broker, serving at {found[0]}: "
            "give each broker an id of its own",
        )

    def _reserve(self, name: str, restoring: bool) -> EventChannel | threading.Event | None:
        """:meth:`HostedChannels.reserve`, a refusal at the cap logged (every 10 s)."""
        try:
            return self._hosted.reserve(name, restoring)
        except LimitReached as exc:
            self._refusals.warning("channels", "refused channel %.80r: %s", name, exc)
            raise

    def failed(self) -> str | None:
        """Why the broker no longer serves though nobody stopped it (None while it does):
        its request loop, or its embedded name server's, ended."""
        for loop in (self._serving, self.ns.serving if self.ns is not None else None):
            if loop is not None and (reason := loop.failed()) is not None:
                return reason
        return None

    def stop(self) -> None:
        """Unpublish, stop dispatching, close the daemon and the embedded name server."""
        self._stopping = True
        if self.names_keeper is not None:  # before the names go: it would put them back
            self.names_keeper.stop(STOP_TIMEOUT_S)
        if self.monitor is not None:
            self.monitor.stop()
        channels = self._hosted.close()
        if self.ns is not None:
            names = [channel_ns_name(channel.name) for channel in channels]
            if self._registered:
                names.append(broker_ns_name(self.config.broker_id))
            self.ns.remove(*names)
        for channel in channels:
            channel.close()
        if self.leases is not None:
            self.leases.stop(STOP_TIMEOUT_S)
            self.leases.release_all()
        self._pool.stop()
        if self._serving is not None:
            self._serving.stop(STOP_TIMEOUT_S)
        if self.ns is not None:
            self.ns.close()
        self.store.close()
        log.info(
            "broker %s %s", self.config.broker_id, "stopped" if self._registered else "not started"
        )

    # -- channels ------------------------------------------------------------------------
    def channel_names(self) -> list[str]:
        return self._hosted.names()

    def channel_table(self) -> dict[str, EventChannel]:
        """Every channel hosted here, by name (a copy)."""
        return {channel.name: channel for channel in self._hosted.all()}

    def channel(self, name: str) -> EventChannel:
        channel = self._hosted.get(name)
        if channel is None:
            raise UnknownChannel(name)
        return channel

    def create_channel(
        self,
        name: str,
        kind: str = ChannelKind.QUEUE.value,
        id_scope: str | None = None,
        restoring: bool = False,
    ) -> str:
        """Host a channel and claim its name; returns the URI clients should use.

        ``id_scope`` (``publisher`` or ``channel``): where its event ids must be unique;
        None: the broker's ``id_scope`` for a new channel. A channel keeps the scope it was
        created with: asking this broker for another raises ChannelConflict.
        The claim is a ``safe`` registration, so when two brokers race for one name the
        loser drops its copy and returns the winner's URI. A new channel past
        ``max_channels`` raises LimitReached, unless ``restoring`` one the store kept
        (nothing stored is left behind when the cap was lowered).

        The channel is made, claimed and restored outside the broker lock, its name
        reserved (:class:`HostedChannels`): a second call for the same name waits for the
        first (at most CREATE_WAIT_S, then BrokerUnavailable) and answers as it left things.
        """
        check_name("channel", name)
        channel_kind = check_kind(kind)
        asked = None if id_scope is None else check_id_scope(id_scope)
        deadline = time.monotonic() + CREATE_WAIT_S
        while (found := self._reserve(name, restoring)) is not None:
            if isinstance(found, EventChannel):
                if asked is not None and asked is not found.id_scope:
                    raise ChannelConflict(name, "ids", found.id_scope.value, asked.value)
                return str(self._served().uriFor(found))
            if not found.wait(max(0.0, deadline - time.monotonic())):
                raise BrokerUnavailable(f"channel {name}", "still being created; try again")
        try:
            return self._create(name, channel_kind, asked or self.config.id_scope)
        finally:
            self._hosted.release(name)

    def _create(self, name: str, kind: ChannelKind, scope: IdScope) -> str:
        """Make, register, claim and restore a channel whose name the caller reserved, and
        add it to the table. A failure leaves nothing behind: not in the daemon, and the
        name-server entry removed when it was claimed."""
        channel = EventChannel(
            name,
            self.config.channel,
            self.store,
            self._pool,
            self.access,
            kind,
            id_scope=scope,
            machine_clock=self._machine,
        )
        uri = str(self._served().register(channel, objectId=CHANNEL_OBJECT_PREFIX + name))
        try:
            held = self.leases is None or self.leases.take(name)
            winner = self._claims.claim(name, uri, kind, scope) if held else None
        except BaseException:
            self._discard(channel)
            self._let_go(name)
            raise
        if winner is None:
            self._discard(channel)
            return self._claims.elsewhere(name)
        if winner != uri:
            self._discard(channel)
            log.info("channel %s is already hosted at %s", name, winner)
            return winner
        try:
            self.store.save_channel(ChannelRecord(name, kind.value, scope.value))
            channel.restore()
            self._hosted.add(name, channel)
        except BaseException:
            self._discard(channel)
            self._claims.give_up(name)  # claimed: no channel behind it now
            self._let_go(name)
            raise
        if self.leases is not None and name not in self.leases.held():
            # lost while it was restored: the lease round found nothing hosted to drop,
            # and a channel hosted without its lease is never renewed nor dropped
            self._drop(name, "its lease was lost while it was restored")
            return self._claims.elsewhere(name)
        log.info("channel %s (%s, ids unique per %s) ready", name, kind.value, scope)
        return uri

    def _let_go(self, name: str) -> None:
        """A channel that could not be hosted: its lease released for another broker."""
        if self.leases is not None:
            self.leases.release(name)

    def _discard(self, channel: EventChannel) -> None:
        """A channel made but not hosted: out of the daemon, its links closed."""
        self._served().unregister(channel)
        channel.close()

    def _note_kept_scope(self, name: str) -> None:
        """A start-up channel that existed keeps its id scope, whatever ``id_scope`` says."""
        channel = self._hosted.get(name)
        if channel is not None and channel.id_scope is not self.config.id_scope:
            log.warning(
                "channel %s keeps ids unique per %s, as it was created; ids unique per %s "
                "apply to new channels",
                name,
                channel.id_scope,
                self.config.id_scope,
            )

    def move_channel(self, name: str, to: str) -> int:
        """Hand a channel to broker ``to`` of the same database: stop serving it, write
        what is deferred, release its lease reserved for ``to`` (which takes it at its
        next lease round, within ``lease_s / 3``); returns the epoch given up. Clients
        look the channel up again; the events wait in the database, in order."""
        if self.leases is None or not isinstance(self.store, LeaseStore):
            raise InvalidArgument("store", "moving a channel needs a store shared by brokers")
        check_name("broker-id", to)
        if to == self.config.broker_id:
            raise InvalidArgument("to", f"channel {name!r} is served by broker {to!r} already")
        if self._names().lookup(broker_ns_name(to)) is None:
            raise InvalidArgument("to", f"no other broker {to!r} in the name server")
        epoch = self.leases.held().get(name)
        channel = self._hosted.remove(name)
        if channel is None or epoch is None:
            raise UnknownChannel(name)
        self._discard(channel)
        self._claims.give_up(name)
        self.leases.forget(name)
        self.store.release(name, epoch, handoff_to=to)
        log.info("channel %s handed over to broker %s (epoch %d)", name, to, epoch)
        return epoch

    def delete_channel(self, name: str, force: bool = False) -> dict[str, int]:
        """Stop serving a channel and forget everything stored for it (its name is free
        again); returns what it held. Refused with ChannelInUse while it has members,
        events not acknowledged or dead letters, unless ``force``. Without a delete, a
        topic or channel made once counted against ``max_channels`` for good (session
        34's soak and newcomer probes)."""
        channel = self._hosted.get(name)
        if channel is None:
            raise UnknownChannel(name)
        self._served().unregister(channel)  # no call starts on it now
        held = channel.holding()
        if any(held.values()) and not force:
            self._served().register(channel, objectId=CHANNEL_OBJECT_PREFIX + name)
            raise ChannelInUse(name, **held)
        self._hosted.remove(name)
        channel.close()
        self._claims.give_up(name)
        self.store.remove_channel(name)  # (fenced by its lease: before the lease goes)
        if self.leases is not None:
            self.leases.forget(name)
        log.warning("channel %s deleted with what it held: %s", name, held)
        return held

    def kill_queues(self, name: str) -> int:
        """The fault toggle of DESIGN §8, refused unless the broker allows fault injection."""
        if not self.config.allow_fault_injection:
            raise FaultInjectionDisabled("kill_queues")
        return self.channel(name).kill_queues()
