"""Channel ownership through leases held in a shared database (failover, DESIGN §7).

Several brokers pointed at one PostgreSQL database each own some channels. A lease is a
row with an owner, an expiry by the database's clock and an epoch: the fencing token that
grows by one at every change of owner. The store checks the epoch inside every write
transaction, so a broker that was frozen past its lease finds its writes refused by the
database (``LeaseLost``), whatever its own clock says. MemoryStore and SQLiteStore serve one
broker and do not implement this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Lease:
    channel: str
    owner: str | None
    """Broker id holding it (None: never taken, or released)."""
    epoch: int
    """Fencing token: grows by one at every change of owner (take-over or move)."""
    expires_in_s: float
    """By the database's clock at read time (negative: expired)."""
    handoff_to: str | None = None
    """A move in progress: only this broker may take it next."""


@runtime_checkable
class LeaseStore(Protocol):
    """Implemented by PostgresStore; the single-broker stores do not."""

    broker_id: str

    def acquire(self, channel: str, ttl_s: float) -> Lease | None:
        """Take the channel's lease when it is free, expired or already ours (then it is a
        renewal of the same epoch); a change of owner bumps the epoch; honours handoff_to
        (only that broker may take a released lease with handoff_to set, until it expires
        once more). The store then fences its writes for the channel with the returned
        epoch. None: another broker holds it."""

    def renew(self, channel: str, epoch: int, ttl_s: float) -> bool:
        """Extend our lease; False when it was lost (then the store refuses the channel's
        writes)."""

    def release(self, channel: str, epoch: int, handoff_to: str | None = None) -> None:
        """Give the lease up now (clean stop or move); our writes for it are refused from
        now on."""

    def leases(self) -> list[Lease]:
        """Every stored channel's lease (a channel with no lease row yet reads as owner
        None)."""
