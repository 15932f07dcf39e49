"""Events suspected of killing the subscribers that take them (poison events), pure
functions over a :class:`~channel_server.core.group.ConsumerGroup`.

Only a handler's failures dead-letter an event (``max_attempts``): a subscriber that dies
is not a handler failing. So an event whose handler kills its process (a crash in native
code, ``os._exit``, the OOM killer) or hangs it went round the subscribers for ever, and
the events pushed with it died with it each time (session 34's newcomer: 214 crashes in
60 s, innocent partitions stalled).

A member that dies holding events (declared dead, back in a new session, or a push
failing after it went out) leaves the first of each partition it held *suspect*. A
suspect goes out alone, to a member holding nothing, and nothing more goes to that member
until it is resolved: a death then is the suspect's own, and is counted. Its ack, or a
handler failure the subscriber lived through, clears it. An event counted ``max_crashes``
deaths is dead-lettered when next taken, instead of going out again. The counts are in
memory: a broker restart starts them again.

Only the first event of each partition is suspected: the events behind it in its
partition did not run, and one before it already acknowledged is done. An event that
ran without its ack arriving (the subscriber died just after) is suspected in place of
the next: it goes alone once, is acknowledged (the subscriber's processed-ID window),
and the poison behind it is suspected at the next death.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from channel_server.core.member import Flight, Member
from channel_server.events import Event, PartitionKey

if TYPE_CHECKING:
    from channel_server.core.group import ConsumerGroup


def died_holding(group: ConsumerGroup, member: Member, answered: bool = False) -> None:
    """The member died (or may have) holding its flights: one it held alone, and that
    reached it, is counted a death; of several, the first of each partition becomes
    suspect. ``answered``: it reached it (the push that failed went out); else only a
    push it answered did (or a get: a pull member's message is in the get's reply). A
    push made to a process already dead reached nothing: the death is not its own."""
    held: list[Flight] = list(member.flights.values())
    suspects = group.suspects
    if len(held) == 1:
        flight = held[0]
        offset = flight.event.offset
        reached = answered or member.pull or flight.seq <= member.answered_seq
        suspects[offset] = suspects.get(offset, 0) + reached
        return
    seen: set[PartitionKey] = set()
    for flight in held:
        ev = flight.event
        if ev.key not in seen:
            seen.add(ev.key)
            suspects.setdefault(ev.offset, 0)


def cleared(group: ConsumerGroup, events: Iterable[Event]) -> None:
    """These events were acknowledged, failed in a handler that returned, or are gone:
    none of them killed anyone."""
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
