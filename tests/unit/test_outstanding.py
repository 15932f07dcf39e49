"""ChannelCore.outstanding: a publisher's work still owed, counted from its sub-queues."""

from __future__ import annotations

from channel_server.core.channel_core import ChannelCore
from channel_server.core.records import ChannelKind, Outstanding
from channel_server.wire import DEFAULT_GROUP
from tests.unit.test_channel_core import complete, config, join, publish, raw, take


def test_a_publishers_events_are_queued_then_in_flight_then_done() -> None:
    core = ChannelCore("c", config())
    publish(core, [raw("a", partition=0), raw("b", partition=1), raw("c", partition=1)])
    publish(core, [raw("x", pub="other")])
    nobody = {DEFAULT_GROUP: 3}  # no member yet to take them
    assert core.outstanding("pub") == Outstanding(queued=3, unserved=nobody)
    assert core.outstanding("other") == Outstanding(queued=1, unserved={DEFAULT_GROUP: 1})
    assert core.outstanding("nobody") == Outstanding()

    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 10)
    batch = take(group, "s")
    flying = sum(1 for ev in batch.events if ev.publisher_id == "pub")
    assert flying > 0
    assert core.outstanding("pub") == Outstanding(queued=3 - flying, in_flight=flying)

    complete(core, group, batch, acked={ev.id for ev in batch.events}, nacked={})
    while (left := core.outstanding("pub")).total:
        batch = take(group, "s")
        complete(core, group, batch, acked={ev.id for ev in batch.events}, nacked={})
    assert left == Outstanding()


def test_dead_letters_are_reported_not_outstanding() -> None:
    core = ChannelCore("c", config(max_attempts=2))
    publish(core, [raw("poison"), raw("fine", ts=2.0)])  # one partition: in order
    group = core.groups[DEFAULT_GROUP]
    join(group, "s", 1)
    for _ in range(2):  # the handler fails on it max_attempts times
        complete(core, group, take(group, "s"), acked=set(), nacked={"poison": "boom"})
    assert core.outstanding("pub") == Outstanding(queued=1, dead_letters=1)
    complete(core, group, take(group, "s"), acked={"fine"}, nacked={})
    assert core.outstanding("pub").to_dict() == {
        "outstanding": 0,
        "queued": 0,
        "in_flight": 0,
        "dead_letters": 1,
        "unserved": {},
    }


def test_each_group_that_must_process_an_event_counts() -> None:
    core = ChannelCore("t", config(), kind=ChannelKind.TOPIC)
    core.add_group("g1")
    core.add_group("g2")
    publish(core, [raw("m")])
    assert core.outstanding("pub").total == 2  # one delivery owed to each group
    join(core.groups["g1"], "s1", 10)
    complete(core, core.groups["g1"], take(core.groups["g1"], "s1"), acked={"m"}, nacked={})
    assert core.outstanding("pub").total == 1
    assert core.outstanding("pub").unserved == {"g2": 1}  # g1 has a member, g2 none
