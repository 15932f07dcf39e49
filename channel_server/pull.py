"""The classic exactly-once ``get`` of a pull member (DESIGN §4).

A pull member has prefetch 1: it holds at most the message it was given last, until its
next ``get`` names it (by uid, ``publisher_id/id``) as the last one received (an ack) or
it times out. That ack is written to the store before the reply: the client names only
its last message, so an ack lost in a crash (acks are otherwise written up to 50 ms
later) handed the messages it acked out again (session 32: 9-53 repeated gets per broker
SIGKILL). A client that says it absorbs repeats (``PullClient``: it remembers what it
got, and acknowledges a message handed out again without showing it) spares that write,
a third of a get's time: its acks go with the others. :class:`PullSide` keeps no state
of its own: what a pull member holds is a flight in the core, like a push member's.
"""

from __future__ import annotations

import logging
from typing import Any

from channel_server.acking import Acking
from channel_server.backup import ChannelBackup
from channel_server.channel_state import ChannelState, MemberSession
from channel_server.core import poison
from channel_server.core.group import ConsumerGroup
from channel_server.core.member import PULL_CALLBACK, PULL_CLOSED, Flight
from channel_server.dispatch import wire_fault
from channel_server.errors import NotSubscribed, SubscriberIdInUse
from channel_server.membership import Membership
from channel_server.outcomes import Outcomes
from channel_server.push import PushDelivery

log = logging.getLogger("channel_server.channel")


class PullSide:
    """Serves ``get``: acknowledges the last message and hands out the next one."""

    def __init__(
        self,
        state: ChannelState,
        backup: ChannelBackup,
        acking: Acking,
        outcomes: Outcomes,
        members: Membership,
        push: PushDelivery,
    ) -> None:
        """``acking`` settles the last message a ``get`` names, as it does a push ack."""
        self._state = state
        self._backup = backup
        self._acking = acking
        self._outcomes = outcomes
        self._members = members
        self._push = push

    def get(
        self, subscriber_id: str, group: str, last_uid: str | None, absorbs: bool = False
    ) -> dict[str, Any]:
        """See EventChannel.get (arguments checked already). A message that cannot cross
        the wire is dead-lettered and the next one tried."""
        state = self._state
        with state.lock:
            grp = self._members.acting(group, subscriber_id)
            if grp is None:
                raise NotSubscribed(subscriber_id, state.name)
            self._backup.repair()
            flight = self._next(grp, subscriber_id, last_uid)
            while flight is not None and (fault := _fault(grp, flight)):
                session = grp.members[subscriber_id].session
                seqs = range(flight.seq, flight.seq + 1)
                self._outcomes.bury(grp, subscriber_id, session, seqs, {flight.event.uid: fault})
                flight = self._next(grp, subscriber_id, None)
            if flight is not None:
                grp.members[subscriber_id].handed_after = last_uid
            self._push.changed()
        if last_uid is not None and not absorbs:  # its ack, on disk before the reply
            self._backup.store.write_deferred_now()  # (outside the lock)
        return {"status": "empty"} if flight is None else _message(flight)

    def acknowledge(self, subscriber_id: str, group: str, last_uid: str) -> None:
        """A pull member leaving names the last message it got: acknowledged, on disk, so
        it does not go back to the group for another member to get again (session 34's
        newcomer: a PullClient's unsubscribe left its last message unacknowledged)."""
        with self._state.lock:
            grp = self._members.acting(group, subscriber_id)
            if grp is None or not grp.members[subscriber_id].pull:
                return
            self._ack_last(grp, subscriber_id, last_uid, self._state.now())
            self._push.changed()
        self._backup.store.write_deferred_now()

    def release(self, subscriber_id: str, group: str, last_uid: str | None) -> None:
        """A pull client closing: its last message got is acknowledged (on disk), and it
        is inactive until its next get, as after ``--pull-timeout`` with no get, so its
        group's others take its partitions now (session 36's newcomer: a group's topic
        waited 60 s for a closed client, then its last message went out again)."""
        with self._state.lock:
            grp = self._members.acting(group, subscriber_id)
            member = grp.members[subscriber_id] if grp is not None else None
            if grp is None or member is None or not member.pull or not member.active:
                return
            if last_uid is not None:
                self._ack_last(grp, subscriber_id, last_uid, self._state.now())
            grp.set_aside(subscriber_id, PULL_CLOSED)
            self._push.changed()
        log.info("%s: %s closed: set aside until its next get", self._state.name, subscriber_id)
        self._backup.store.write_deferred_now()

    def _next(self, grp: ConsumerGroup, member_id: str, last_uid: str | None) -> Flight | None:
        """Acknowledge ``last_uid`` and hand out the next message, or the same one again
        when the client did not get it (a retried get). A member timed out for not
        calling ``get`` is readmitted by its next one."""
        now = self._state.now()
        member = grp.members[member_id]
        if not member.active:
            closed = member.inactive_reason == PULL_CLOSED  # (routine: it closed)
            level = logging.INFO if closed else logging.WARNING
            log.log(level, "%s: %s readmitted by a get", self._state.name, member_id)
            grp.join(member_id, PULL_CALLBACK, 1, self._state.core.new_session(), now, pull=True)
        member = grp.members[member_id]
        member.seen(now)
        self._check_client(grp, member_id, last_uid)
        if last_uid is not None:
            self._ack_last(grp, member_id, last_uid, now)
        flights = grp.flights_of(member_id)
        if not flights and grp.take_batch(member_id, now) is not None:
            flights = grp.flights_of(member_id)
        return flights[0] if flights else None

    def _check_client(self, grp: ConsumerGroup, member_id: str, last_uid: str | None) -> None:
        """While the member holds a message, a get must name it (the next get) or what
        the get that handed it out named (that get retried). Any other is a second client
        with the same id: refused, or both would get every message (session 32)."""
        held = grp.flights_of(member_id)
        if not held:
            return
        holding = held[0].event.uid
        if last_uid in (holding, grp.members[member_id].handed_after):
            return
        named = "none" if last_uid is None else repr(last_uid)
        raise SubscriberIdInUse(
            member_id,
            grp.name,
            f"by another client: it holds {holding!r}, and this get names {named} as the "
            "last message it got. One subscriber id is one client; clients sharing the "
            "work each take an id of their own in one group (subscribe(topic, group=...))",
        )

    def _ack_last(self, grp: ConsumerGroup, member_id: str, last_uid: str, now: float) -> None:
        """Acknowledge the message a pull client names as the last one it got, whether it
        is held (the usual case) or back at the head of its partition (after a restart)."""
        held = [f for f in grp.flights_of(member_id) if f.event.uid == last_uid]
        if not held and not grp.flights_of(member_id) and grp.take_event(member_id, last_uid, now):
            held = grp.flights_of(member_id)
        if held:
            who = MemberSession(member_id, grp.name, grp.members[member_id].session)
            self._acking.settle(grp, who, held[0].seq, [last_uid], {}, now)


def _fault(grp: ConsumerGroup, flight: Flight) -> str | None:
    """Why a message is dead-lettered rather than handed out: it cannot cross the wire,
    or subscribers died holding it (see :mod:`~channel_server.core.poison`)."""
    lethal = poison.lethal(grp, [flight.event])
    return lethal.get(flight.event.uid) or wire_fault(_message(flight))


def _message(flight: Flight) -> dict[str, Any]:
    return {"status": "message", "event": flight.event.to_dict(flight.attempt)}
