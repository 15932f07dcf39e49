"""Events suspected of killing the subscribers that take them (poison events), pure
functions over a :class:`~channel_server.core.group.ConsumerGroup`.

Only a handler's failures dead-letter an event (``max_attempts``): a subscriber that dies
is not a handler failing. So an event whose handler kills its process (a crash in native
code, ``os._exit``, the OOM killer) or hangs it went round the subscribers for ever, and
the events pushed with it died with it each time (session 34's newcomer: 214 crashes in
60 s, innocent partitions stalled).

A member that dies holding events (declared dead, or back in a new session) leaves every
event it held *suspect*. A suspect goes out alone, to a member holding nothing, and
nothing more goes to that member until it is resolved: a death then is the suspect's own,
and is counted. Its ack (or its dead-lettering) clears it; a handler failure does not:
retried, it goes alone again, so the suspects behind it in its partition do not go out in
a batch behind a head no longer suspect. An event counted ``max_crashes`` deaths is
dead-lettered when next taken, instead of going out again. The counts are in memory: a
broker restart starts them again.

Every event held is suspected, not only the first of each partition: a subscriber that
ran events and died before their acks went out (fast handlers, acks sent in batches)
would have them acknowledged one by one while the poison behind them went out in a
batch again, and it took as many crashes as its place in its partition (session 35's
probe: 35 crashes for a poison 40th in its partition, the events before it run 30
times). The suspects cost a push each, once, after a death.

A death counts only against an event the member held alone that had reached it (a push
answered, or a get), and only once it is suspect: the first death it was in makes it
suspect. A push that failed after it went out (the member may have died of it, or is only
slow: a timeout) leaves its lone event to be counted if the member turns out dead before
any sign of life: a push that went out after it shows it was alive then, and a member
given up on for failed pushes alone is not known dead. A push to a process already dead,
or a slow subscriber's timeouts, are no deaths (session 35's probe: innocent events
dead-lettered both ways).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from channel_server.core.member import Flight, Member
from channel_server.events import Event, PartitionKey

if TYPE_CHECKING:
    from channel_server.core.group import ConsumerGroup


def died_holding(group: ConsumerGroup, member: Member) -> None:
    """The member died (declared dead, or back in a new session) holding its flights:
    the death is counted against the one event it held alone, reached and suspect
    already (or the lone event of a push that failed once sent, with no sign of life
    since); every event it held becomes suspect."""
    held: list[Flight] = list(member.flights.values())
    culprit, member.maybe_killed_by = member.maybe_killed_by, None
    if len(held) == 1 and (member.pull or held[0].seq <= member.answered_seq):
        culprit = held[0].event.offset
    suspects = group.suspects
    if culprit is not None:
        suspects[culprit] = suspects[culprit] + 1 if culprit in suspects else 0
    suspect(group, held)


def push_lost(group: ConsumerGroup, member: Member, flights: list[Flight], alone: bool) -> None:
    """A push of ``flights`` failed after it went out, and the member is not given up
    on: it may have died of it, or be slow. One it held ``alone`` is counted if the
    member turns out dead before any sign of life (:func:`died_holding`); several
    become suspect."""
    if alone:
        member.maybe_killed_by = flights[0].event.offset
    else:
        suspect(group, flights)


def suspect(group: ConsumerGroup, flights: Iterable[Flight]) -> None:
    """These events go alone from now on (a death after counts)."""
    suspects = group.suspects
    for flight in flights:
        suspects.setdefault(flight.event.offset, 0)


def cleared(group: ConsumerGroup, events: Iterable[Event]) -> None:
    """These events are done with (acknowledged or dead-lettered): whatever killed a
    subscriber, they go out no more."""
    suspects = group.suspects
    if suspects:
        for ev in events:
            suspects.pop(ev.offset, None)


def ready_suspect(group: ConsumerGroup, member: Member) -> PartitionKey | None:
    """A ready partition of the member whose next event is suspect, if any (it goes
    alone). Costs a pass over the member's ready partitions: callers ask only while the
    group has suspects."""
    suspects, partitions = group.suspects, group.partitions
    for key in member.ready:
        if partitions[key].pending[0].offset in suspects:
            return key
    return None


def lethal(group: ConsumerGroup, events: Iterable[Event]) -> dict[str, str]:
    """Of events just taken for delivery, those to dead-letter instead: counted
    ``max_crashes`` deaths (uid -> why). Empty when the limit is off (0)."""
    limit = group.policy.max_crashes
    suspects = group.suspects
    if not limit or not suspects:
        return {}
    return {
        ev.uid: (
            f"{deaths} subscribers died or went silent holding it alone, and none "
            f"acknowledged it (--max-crashes {limit}): a poison event?"
        )
        for ev in events
        if (deaths := suspects.get(ev.offset, 0)) >= limit
    }
