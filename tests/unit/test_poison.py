"""Poison events (core/poison.py): a member dying with events in hand leaves them suspect;
a suspect goes alone, to a member holding nothing; deaths with it alone are counted, and
at ``max_crashes`` it is to be dead-lettered. On a fake clock, no threads."""

from __future__ import annotations

from channel_server.core import poison
from channel_server.core.group import ConsumerGroup, GroupPolicy
from channel_server.core.member import Batch, WindowPolicy
from tests.unit.group_checks import check_group, ids, make_event, uids


class Driver:
    """A group driven as the channel drives it, with a fake clock and sessions."""

    def __init__(self, max_crashes: int = 3) -> None:
        policy = GroupPolicy(window=WindowPolicy(1000), max_crashes=max_crashes)
        self.g = ConsumerGroup("g", policy)
        self.now = 0.0
        self._session = 0

    def join(self, member_id: str) -> None:
        self._session += 1
        self.g.join(member_id, "cb", 100, self._session, self.now)

    def take(self, member_id: str, answered: bool = True) -> Batch | None:
        """A push, answered by the member unless not ``answered`` (still on its way)."""
        batch = self.g.take_batch(member_id, self.now)
        if batch is not None and answered:
            assert self.g.delivered(batch, self.now)
        return batch

    def ack(self, batch: Batch, nacked: dict[str, str] | None = None) -> None:
        acked = [uid for uid in uids(batch.events) if uid not in (nacked or {})]
        last = batch.first_seq + len(batch.events) - 1
        self.g.acknowledge(batch.member_id, batch.session, acked, nacked or {}, last, self.now)

    def events(self, *partitions: int, per: int = 1) -> None:
        offsets = iter(range(len(partitions) * per))
        self.g.enqueue([make_event(next(offsets), part) for part in partitions for _ in range(per)])


def test_a_death_holding_several_events_leaves_every_one_suspect() -> None:
    """Not only the first of each partition: events that ran without their acks going
    out would be acknowledged one by one, and the poison behind them went out in a
    batch again (session 35's probe: 35 crashes for a poison 40th in its partition)."""
    d = Driver()
    d.join("a")
    d.events(0, 1, per=3)  # e0-e2 in partition 0, e3-e5 in partition 1
    batch = d.take("a")
    assert batch is not None and ids(batch.events) == ["e0", "e1", "e2", "e3", "e4", "e5"]
    d.g.deactivate("a", "no answer to pings")
    assert d.g.suspects == dict.fromkeys(range(6), 0)  # no death counted: none was alone
    check_group(d.g)


def test_a_suspect_goes_alone_to_a_member_holding_nothing_and_its_ack_clears_it() -> None:
    d = Driver()
    d.join("a")
    d.events(0, 1, per=2)
    d.take("a")
    d.join("a")  # back in a new session: its last life ended holding them
    first = d.take("a")
    assert first is not None and ids(first.events) == ["e0"]
    assert d.take("a") is None  # nothing more while a suspect is in hand...
    assert not d.g.has_ready("a")  # ...and the push loop is not woken for nothing
    d.ack(first)
    alone = [ids(first.events)]
    while d.g.suspects:
        batch = d.take("a")
        assert batch is not None and len(batch.events) == 1
        alone.append(ids(batch.events))
        d.ack(batch)
    assert sorted(alone) == [["e0"], ["e1"], ["e2"], ["e3"]]
    d.g.enqueue([make_event(10, 0), make_event(11, 1)])
    rest = d.take("a")
    assert rest is not None and ids(rest.events) == ["e10", "e11"]  # back to whole pushes
    check_group(d.g)


def test_a_member_holding_work_gets_nothing_more_until_it_can_take_the_suspect_alone() -> None:
    d = Driver()
    d.join("a")
    d.join("b")
    d.events(0, 1)  # partition 0 to a, partition 1 to b
    held_by_b = d.take("b")
    assert held_by_b is not None
    d.take("a")
    d.g.enqueue([make_event(10, 0), make_event(11, 1)])
    d.g.deactivate("a", "no answer to pings")  # e0 was all it held: now it is suspect
    assert d.g.suspects == {0: 0}
    assert d.g.members["b"].partitions.keys() == {("p", 0), ("p", 1)}
    assert d.take("b") is None and not d.g.has_ready("b")  # b holds e1: the suspect waits
    d.ack(held_by_b)
    alone = d.take("b")
    assert alone is not None and ids(alone.events) == ["e0"]
    d.ack(alone)
    after = d.take("b")
    assert after is not None and sorted(ids(after.events)) == ["e10", "e11"]
    check_group(d.g)


def test_deaths_with_the_event_alone_are_counted_until_it_is_lethal() -> None:
    d = Driver(max_crashes=3)
    d.join("a")
    d.events(0, 1, per=2)  # e0 is the poison; e1 behind it, e2 and e3 innocent
    d.take("a")
    deaths = 0
    for _ in range(10):
        d.join("a")  # the subscriber crashed and came back
        if poison.lethal(d.g, d.g.partitions[("p", 0)].pending[:1]):
            break
        batch = d.take("a")
        assert batch is not None and len(batch.events) == 1
        if ids(batch.events) == ["e0"]:
            deaths += 1
        else:
            d.ack(batch)  # an innocent suspect: processed
    assert deaths == 3 and d.g.suspects[0] == 3
    batch = d.take("a")
    assert batch is not None and ids(batch.events) == ["e0"]
    assert set(poison.lethal(d.g, batch.events)) == {"p/e0"}
    assert "--max-crashes 3" in poison.lethal(d.g, batch.events)["p/e0"]


def test_no_limit_never_makes_an_event_lethal() -> None:
    d = Driver(max_crashes=0)
    d.join("a")
    d.events(0)
    for _ in range(10):
        d.take("a")
        d.join("a")
    assert d.g.suspects == {0: 9}  # the first death made it suspect
    assert poison.lethal(d.g, d.g.partitions[("p", 0)].pending) == {}


def test_a_handler_failure_is_no_death_and_the_suspects_still_go_alone() -> None:
    """Cleared by its handler's failure, the retried head went out in a batch with the
    suspects behind it, and a poison among them was not isolated."""
    d = Driver()
    d.join("a")
    d.events(0, 0)
    d.take("a")
    d.join("a")
    alone = d.take("a")
    assert alone is not None and ids(alone.events) == ["e0"]
    d.ack(alone, nacked={"p/e0": "ValueError"})  # the subscriber lived through it
    assert d.g.suspects == {0: 0, 1: 0}  # no death counted
    again = d.take("a")
    assert again is not None and ids(again.events) == ["e0"]  # alone again, then e1 alone
    d.ack(again)
    last = d.take("a")
    assert last is not None and ids(last.events) == ["e1"]
    d.ack(last)
    assert d.g.suspects == {}
    check_group(d.g)


def test_leaving_cleanly_leaves_nothing_suspect() -> None:
    d = Driver()
    d.join("a")
    d.join("b")
    d.events(0, 0)
    d.take("a")
    d.g.leave("a")
    assert d.g.suspects == {}
    batch = d.take("b")
    assert batch is not None and ids(batch.events) == ["e0", "e1"]


def test_a_death_is_not_counted_against_an_event_that_never_reached_the_member() -> None:
    """A push made to a process already dead: its ping or its connection fails first
    (not sent), or the member is declared dead while that push is on its way. Counting
    those dead-lettered an innocent event in place of the poison that killed it."""
    d = Driver()
    d.join("a")
    d.events(0)
    on_its_way = d.take("a", answered=False)
    assert on_its_way is not None
    d.g.deactivate("a", "no answer to pings")
    assert d.g.suspects == {0: 0}  # suspect all the same: it goes alone next time
    d.join("a")
    failed = d.take("a", answered=False)
    assert failed is not None
    d.g.push_failed(failed, d.now, sent=False)
    assert d.g.suspects == {0: 0}
    d.now += 1.0  # past the failed push's back-off
    sent = d.take("a", answered=False)
    assert sent is not None
    d.g.push_failed(sent, d.now, sent=True)  # it went out: the member may have died of it
    assert d.g.suspects == {0: 0}  # ... if it turns out dead before any sign of life
    d.g.deactivate("a", "no answer to pings")
    assert d.g.suspects == {0: 1}


def test_a_slow_subscribers_timed_out_pushes_are_no_deaths() -> None:
    """A push that timed out on a living subscriber was counted a death each time: one
    slow subscriber dead-lettered events it had processed (session 35's probe, 2 of
    2). A sign of life after the failure, or another push that went out, clears it;
    a member given up on for failed pushes alone is not known dead."""
    d = Driver()
    d.join("a")
    d.events(0)
    d.take("a")
    d.join("a")  # a death: e0 suspect
    for failures in range(1, 4):  # three pushes that go out and time out in a row
        d.now += 1.0
        push = d.take("a", answered=False)
        assert push is not None and ids(push.events) == ["e0"]
        gave_up = d.g.push_failed(push, d.now, sent=True)
        assert gave_up is (failures == 3)
    assert d.g.suspects == {0: 0}
    d.join("a")
    d.now += 1.0
    push = d.take("a", answered=False)
    assert push is not None
    d.g.push_failed(push, d.now, sent=True)
    d.g.heartbeat("a", d.now)  # it lives
    d.g.deactivate("a", "acks missing 3 times in a row")
    assert d.g.suspects == {0: 0}
