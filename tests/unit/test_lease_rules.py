"""The lease keeper's rules with a fake store and a fake clock: what is renewed, dropped and
taken over (the database's side is tests/unit/test_pg_leases.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from channel_server.errors import StoreError
from channel_server.lease_keeper import LeaseKeeper, renewal_too_late, takeable
from channel_server.move_cli import plan_rebalance
from channel_server.store.leases import Lease

LEASE_S = 3.0


@dataclass
class FakeLeases:
    """Leases by channel; ``down`` makes every call fail as an unreachable database."""

    broker_id: str = "me"
    rows: dict[str, Lease] = field(default_factory=dict)
    down: bool = False

    def _check(self) -> None:
        if self.down:
            raise StoreError("postgresql://db", "unreachable")

    def acquire(self, channel: str, ttl_s: float) -> Lease | None:
        self._check()
        lease = self.rows.get(channel)
        if lease is not None and not (lease.owner == self.broker_id or takeable(lease, "me")):
            return None
        epoch = 1 if lease is None else lease.epoch + (lease.owner != self.broker_id)
        self.rows[channel] = Lease(channel, self.broker_id, epoch, ttl_s)
        return self.rows[channel]

    def renew(self, channel: str, epoch: int, ttl_s: float) -> bool:
        self._check()
        lease = self.rows[channel]
        return (lease.owner, lease.epoch) == (self.broker_id, epoch)

    def release(self, channel: str, epoch: int, handoff_to: str | None = None) -> None:
        self.rows[channel] = Lease(channel, None, epoch, 0.0, handoff_to)

    def leases(self) -> list[Lease]:
        self._check()
        return list(self.rows.values())


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def keeper(store: FakeLeases, clock: Clock) -> tuple[LeaseKeeper, list[str], list[str]]:
    taken: list[str] = []
    dropped: list[str] = []

    def take_over(name: str) -> None:
        assert k.take(name)
        taken.append(name)

    k = LeaseKeeper(store, LEASE_S, take_over, lambda name, why: dropped.append(name), clock)
    return k, taken, dropped


def test_takeable_leases() -> None:
    assert takeable(Lease("c", "other", 1, -0.1), "me")
    assert not takeable(Lease("c", "other", 1, 2.0), "me")
    assert takeable(Lease("c", None, 1, 2.0), "me")
    assert takeable(Lease("c", "me", 1, -1.0), "me")  # ours, dropped when the db was away
    assert not takeable(Lease("c", "me", 1, 1.0), "me")  # dropped, not expired yet
    assert takeable(Lease("c", None, 1, 2.0, handoff_to="me"), "me")
    assert not takeable(Lease("c", None, 1, 2.0, handoff_to="b3"), "me")
    assert takeable(Lease("c", None, 1, -0.5, handoff_to="b3"), "me")  # b3 never came


def test_renewal_is_too_late_after_a_whole_term() -> None:
    assert not renewal_too_late(10.0, 12.9, LEASE_S)
    assert renewal_too_late(10.0, 13.0, LEASE_S)


def test_a_round_renews_what_is_held_and_takes_over_what_expired() -> None:
    store, clock = FakeLeases(), Clock()
    store.rows["dead"] = Lease("dead", "other", 4, -0.2)
    store.rows["alive"] = Lease("alive", "other", 2, 2.0)
    k, taken, dropped = keeper(store, clock)
    assert k.take("mine")
    k.round()
    assert taken == ["dead"] and dropped == []
    assert k.held() == {"mine": 1, "dead": 5}
    assert k.interval_s == LEASE_S / 3


def test_a_lease_taken_by_another_broker_drops_the_channel() -> None:
    store, clock = FakeLeases(), Clock()
    k, _, dropped = keeper(store, clock)
    assert k.take("c")
    store.rows["c"] = Lease("c", "other", 2, 5.0)
    k.round()
    assert dropped == ["c"] and k.held() == {}


def test_an_unreachable_database_drops_the_channel_only_after_a_term() -> None:
    store, clock = FakeLeases(), Clock()
    k, _, dropped = keeper(store, clock)
    assert k.take("c")
    store.down = True
    clock.now += LEASE_S - 0.5
    k.round()
    assert dropped == [] and k.held() == {"c": 1}
    clock.now += 0.5
    k.round()
    assert dropped == ["c"] and k.held() == {}


def test_a_lone_broker_takes_its_channels_back_once_the_database_returns() -> None:
    """Nobody else took the lease while the database was away: once it has expired in the
    database, this broker takes it back (it never did: its channels stayed unserved)."""
    store, clock = FakeLeases(), Clock()
    k, taken, dropped = keeper(store, clock)
    assert k.take("c")
    store.down = True
    clock.now += LEASE_S
    k.round()
    assert dropped == ["c"]
    store.down = False
    store.rows["c"] = Lease("c", "me", 1, -0.1)  # the database's clock: it expired
    k.round()
    assert taken == ["c"] and k.held() == {"c": 1}  # the same epoch: nobody wrote since


def test_release_all_hands_every_lease_back() -> None:
    store, clock = FakeLeases(), Clock()
    k, _, _ = keeper(store, clock)
    assert k.take("a") and k.take("b")
    k.release_all()
    assert k.held() == {}
    assert {lease.owner for lease in store.rows.values()} == {None}


def test_rebalance_plans_the_fewest_moves_to_within_one() -> None:
    owners = {"a": "b1", "b": "b1", "c": "b1", "d": "b1", "e": "b2"}
    moves = plan_rebalance(owners, ["b1", "b2", "b3"])
    assert len(moves) == 2 and {m[1] for m in moves} == {"b1"}
    assert sorted(m[2] for m in moves) == ["b2", "b3"] or sorted(m[2] for m in moves) == [
        "b3",
        "b3",
    ]
    after = dict(owners) | {channel: to for channel, _, to in moves}
    counts = sorted(list(after.values()).count(b) for b in ("b1", "b2", "b3"))
    assert counts[-1] - counts[0] <= 1
    assert plan_rebalance({"a": "b1", "b": "b2"}, ["b1", "b2"]) == []


def test_the_rounds_run_on_their_own_thread_until_stopped() -> None:
    """start() runs rounds every interval on a thread of the keeper's (not the dispatch
    pool, which pushes to subscribers that may be frozen); stop() ends them."""
    store = FakeLeases()
    store.rows["dead"] = Lease("dead", "other", 1, -1.0)
    took = threading.Event()
    k = LeaseKeeper(store, 0.03, lambda name: took.set(), lambda name, why: None)
    k.start()
    try:
        assert took.wait(5.0), "no round ran"
        thread = k._rounds.thread
        assert thread.name == "leases" and thread is not threading.current_thread()
    finally:
        k.stop(5.0)
    assert not thread.is_alive()
