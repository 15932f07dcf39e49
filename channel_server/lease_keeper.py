"""Channel leases for brokers sharing one PostgreSQL database (failover, README "Running on
several machines").

A broker whose store is a :class:`~channel_server.store.leases.LeaseStore` hosts a channel
only while it holds the channel's lease: it takes the lease before restoring the channel,
renews every lease it holds ``RENEWALS_PER_TERM`` times per term, drops a channel whose
renewal failed (another broker took it, or the database stayed unreachable for a whole
term), and takes over the channels whose owner stopped renewing. The database's clock
decides expiry and its fencing refuses a late owner's writes (``LeaseLost``); this module
only decides what to ask for and when.

The rounds run on a thread of their own (:meth:`LeaseKeeper.start`), never on the dispatch
pool: a push to a frozen subscriber holds a pool thread for the ack timeout, and a few of
them would hold every one for longer than a lease term, costing the broker channels it
serves well. A take-over only starts there: the broker restores the channel elsewhere, so
the rounds go on renewing while it does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from channel_server.errors import ChannelError, StoreError
from channel_server.rounds import Rounds
from channel_server.store.leases import Lease, LeaseStore

log = logging.getLogger(__name__)

RENEWALS_PER_TERM = 3
"""Renewals per lease term: two may fail (a slow database, a busy broker) before it ends."""


def takeable(lease: Lease, me: str) -> bool:
    """Whether this broker may take a lease it does not hold: expired, released, or handed
    to it; a release handed to another broker is theirs until it expires once more. One
    still in its name but not held was dropped when it could not be renewed (the
    database was away for a term): once expired, it is taken back (session 32: a lone
    broker never served its channels again after a database outage)."""
    if lease.owner == me:
        return lease.expires_in_s <= 0
    if lease.handoff_to is not None:
        return lease.handoff_to == me or lease.expires_in_s <= 0
    return lease.owner is None or lease.expires_in_s <= 0


def renewal_too_late(last_renewed: float, now: float, lease_s: float) -> bool:
    """Whether a lease last renewed at ``last_renewed`` (this broker's monotonic clock) may
    have expired in the database by ``now``: then the channel is dropped even when the
    database cannot be asked (its fencing refuses our writes anyway)."""
    return now - last_renewed >= lease_s


@dataclass
class _Held:
    epoch: int
    renewed_at: float


class LeaseKeeper:
    """The leases one broker holds, renewed by :meth:`round` (on its own thread every
    :attr:`interval_s`, between :meth:`start` and :meth:`stop`), and the take-over of
    channels nobody renews."""

    def __init__(
        self,
        store: LeaseStore,
        lease_s: float,
        take_over: Callable[[str], None],
        drop: Callable[[str, str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``take_over(name)``: host a channel whose lease is free (it calls :meth:`take`
        before restoring; it returns at once and logs a failure itself);
        ``drop(name, why)``: stop serving a channel whose lease is lost."""
        self.store = store
        self.lease_s = lease_s
        self._take_over = take_over
        self._drop = drop
        self._clock = clock
        # Guards _held (channel -> the epoch held and when it was last renewed): the
        # broker's creating threads take leases while the round renews them.
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}
        self._rounds = Rounds("leases", self.interval_s, self.round, "lease round failed")

    def start(self) -> None:
        """Start the rounds (the broker does, before it restores its channels, so the
        leases it takes are renewed while the rest restore)."""
        self._rounds.start()

    def stop(self, timeout_s: float) -> None:
        """End the rounds: the round in hand finishes (waited for at most ``timeout_s``)."""
        self._rounds.stop(timeout_s)

    @property
    def interval_s(self) -> float:
        return self.lease_s / RENEWALS_PER_TERM

    def take(self, name: str) -> bool:
        """Take (or renew) a channel's lease before hosting it; False: another holds it."""
        lease = self.store.acquire(name, self.lease_s)
        with self._lock:
            if lease is None:
                self._held.pop(name, None)
                return False
            self._held[name] = _Held(lease.epoch, self._clock())
        return True

    def held(self) -> dict[str, int]:
        with self._lock:
            return {name: held.epoch for name, held in self._held.items()}

    def round(self) -> None:
        """Renew what is held (dropping what was lost), then take over what nobody renews."""
        for name, epoch in self.held().items():
            self._renew(name, epoch)
        try:
            leases = self.store.leases()
        except StoreError as exc:
            log.warning("cannot read the leases (%s): no take-over this round", exc)
            return
        held = self.held()
        for lease in leases:
            if lease.channel not in held and takeable(lease, self.store.broker_id):
                self._take_over_one(lease)

    def _renew(self, name: str, epoch: int) -> None:
        try:
            if self.store.renew(name, epoch, self.lease_s):
                with self._lock:
                    if name in self._held:
                        self._held[name].renewed_at = self._clock()
                return
            why = "another broker took its lease"
        except StoreError as exc:
            with self._lock:
                renewed_at = self._held[name].renewed_at if name in self._held else 0.0
            if not renewal_too_late(renewed_at, self._clock(), self.lease_s):
                log.warning("channel %s: lease not renewed (%s); trying again", name, exc)
                return
            why = f"its lease could not be renewed for {self.lease_s:g} s ({exc})"
        self.forget(name)
        self._drop(name, why)

    def _take_over_one(self, lease: Lease) -> None:
        if lease.handoff_to == self.store.broker_id:  # a planned move: nothing went wrong
            log.info("taking channel %s handed over to this broker", lease.channel)
        else:
            expired = lease.expires_in_s <= 0
            since = f"expired {-lease.expires_in_s:.1f} s ago" if expired else "free"
            log.warning(
                "taking over channel %s from %s (lease %s)",
                lease.channel,
                lease.owner or "-",
                since,
            )
        self._take_over(lease.channel)  # it starts the restore elsewhere and says how it went

    def forget(self, name: str) -> None:
        with self._lock:
            self._held.pop(name, None)

    def release(self, name: str) -> None:
        """Give one lease up (a channel not hosted after all); a failure leaves it to expire."""
        epoch = self.held().get(name)
        self.forget(name)
        if epoch is None:
            return
        try:
            self.store.release(name, epoch)
        except ChannelError as exc:
            log.warning("channel %s: lease not released (%s); it will expire", name, exc)

    def release_all(self) -> None:
        """Give every lease up (a clean stop: a standby takes the channels at once)."""
        for name in self.held():
            self.release(name)
