"""The one error tree of the service; every class crosses the wire as itself.

Client mistakes, capacity refusals and transport trouble are separate branches so a caller
can tell "fix your input" from "retry later" from "the peer is gone". Each error keeps its
details as attributes (``field``, ``accepted`` ...) and a readable one-line message; each
class declares the ones it sets (annotations only, no class attributes) so a type checker
knows them.
"""

from __future__ import annotations

from typing import Any


class ChannelError(Exception):
    """Root of every error the service raises on purpose."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.__dict__.update(details)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


# -- client mistakes ---------------------------------------------------------------------
class ClientError(ChannelError):
    """The request itself is wrong; retrying it unchanged will fail again."""


class InvalidEvent(ClientError):
    """An event breaks a rule of DESIGN §3; the whole batch was rejected.

    Attributes: ``field`` (the offending field), ``reason``, ``index`` (position in the batch,
    or -1 for a single event).
    """

    field: str
    reason: str
    index: int

    def __init__(self, field: str, reason: str, index: int = -1) -> None:
        where = f"event #{index}: " if index >= 0 else ""
        super().__init__(f"{where}{field}: {reason}", field=field, reason=reason, index=index)


class InvalidArgument(ClientError):
    """An RPC argument other than an event is malformed (a name, a count, a URI)."""

    argument: str
    reason: str

    def __init__(self, argument: str, reason: str) -> None:
        super().__init__(f"{argument}: {reason}", argument=argument, reason=reason)


class UnknownChannel(ClientError):
    """No channel of that name is hosted here or registered in the name server."""

    channel: str

    def __init__(self, channel: str) -> None:
        super().__init__(f"unknown channel {channel!r}", channel=channel)


class SubscriberIdInUse(ClientError):
    """The subscriber id is active from another callback address (``how`` says where, for
    a pull member: another client's gets)."""

    subscriber_id: str
    group: str

    def __init__(self, subscriber_id: str, group: str, how: str = "") -> None:
        how = how or (
            "from another process that answers (stop it, or pick another id; `python -m "
            "channel_server forget CHANNEL ID --force` removes a member that should not be)"
        )
        super().__init__(
            f"subscriber id {subscriber_id!r} is already active in group {group!r} {how}",
            subscriber_id=subscriber_id,
            group=group,
        )


class NotSubscribed(ClientError):
    """The subscriber is not a member of the group it names."""

    subscriber_id: str
    channel: str

    def __init__(self, subscriber_id: str, channel: str) -> None:
        super().__init__(
            f"{subscriber_id!r} is not subscribed to {channel!r}",
            subscriber_id=subscriber_id,
            channel=channel,
        )


class MemberActive(ClientError):
    """``forget`` named a member that is active (in rotation) without ``force``: a running
    subscriber would only subscribe again, so it is refused unless forced."""

    subscriber_id: str
    group: str
    channel: str

    def __init__(self, subscriber_id: str, group: str, channel: str) -> None:
        super().__init__(
            f"{subscriber_id!r} is active in group {group!r} of {channel!r}: stop it first, "
            "or force it out (it is then unsubscribed; a subscriber still running "
            "subscribes again)",
            subscriber_id=subscriber_id,
            group=group,
            channel=channel,
        )


class NotAuthorized(ClientError):
    """The caller gave no valid credential, or its user may not do this on this channel.

    Attributes: ``reason``, and ``action`` / ``channel`` when a permission was missing.
    """

    reason: str
    action: str
    channel: str

    def __init__(self, reason: str, action: str = "", channel: str = "") -> None:
        super().__init__(f"not authorized: {reason}", reason=reason, action=action, channel=channel)


REFUSED_MARK = "rejected: not authorized: "
"""How a refused connection reads in the client's CommunicationError (the daemon's reason
follows): see ``wire.as_refusal``."""


class ChannelConflict(ClientError):
    """The channel exists with another setting than the one asked for (its id scope: where
    event ids must be unique, fixed when it was created)."""

    channel: str
    setting: str
    existing: str
    requested: str

    def __init__(self, channel: str, setting: str, existing: str, requested: str) -> None:
        super().__init__(
            f"channel {channel!r} exists with {setting} {existing!r}, not {requested!r} "
            "(fixed when it was created)",
            channel=channel,
            setting=setting,
            existing=existing,
            requested=requested,
        )


class ChannelInUse(ClientError):
    """``delete`` named a channel that still holds something (members, events not yet
    acknowledged, dead letters) without ``force``: all of it would go with the channel."""

    channel: str
    members: int
    unacked: int
    dead_letters: int

    def __init__(self, channel: str, members: int, unacked: int, dead_letters: int) -> None:
        super().__init__(
            f"channel {channel!r} still has {members} members, {unacked} events not "
            f"acknowledged and {dead_letters} dead letters: stop its subscribers and let "
            "them finish, or force it (everything it holds is dropped)",
            channel=channel,
            members=members,
            unacked=unacked,
            dead_letters=dead_letters,
        )


class FaultInjectionDisabled(ClientError):
    """A fault-injection call reached a broker started without --allow-fault-injection."""

    call: str

    def __init__(self, call: str) -> None:
        super().__init__(
            f"{call} refused: the broker was not started with --allow-fault-injection",
            call=call,
        )


# -- capacity ----------------------------------------------------------------------------
class CapacityError(ChannelError):
    """The service is healthy but cannot take more now; retry later."""


QUEUE_LIMITS = {
    "events": "unacknowledged events",
    "bytes": "bytes queued",
    "partitions": "partition sub-queues",
}
"""What a channel's ``capacity`` counts, by QueueFull's ``limit``."""


class QueueFull(CapacityError):
    """The channel holds ``capacity`` unacknowledged events (``limit`` "events"),
    ``capacity`` bytes of them (``limit`` "bytes") or ``capacity`` partition sub-queues
    over its groups (``limit`` "partitions").

    ``accepted`` events of the batch were stored, the ids in ``duplicates`` were already
    known, and the events whose ids are in ``refused_ids`` were not stored: publish those
    again after ``retry_after_s``.
    """

    channel: str
    capacity: int
    limit: str
    accepted: int
    refused: int
    refused_ids: list[str]
    duplicates: list[str]
    retry_after_s: float

    def __init__(
        self,
        channel: str,
        capacity: int,
        accepted: int,
        refused_ids: list[str],
        duplicates: list[str] | None = None,
        retry_after_s: float = 0.5,
        limit: str = "events",
    ) -> None:
        super().__init__(
            f"channel {channel!r} is full ({capacity} {QUEUE_LIMITS[limit]}): "
            f"{accepted} accepted, {len(refused_ids)} refused; retry in {retry_after_s:g} s",
            channel=channel,
            capacity=capacity,
            limit=limit,
            accepted=accepted,
            refused=len(refused_ids),
            refused_ids=list(refused_ids),
            duplicates=list(duplicates or []),
            retry_after_s=retry_after_s,
        )


class LimitReached(CapacityError):
    """A configured cap is reached: ``limit`` ``resource`` ("channels" of a broker,
    "members" of a channel) in ``where``. Retry once some are gone, or raise the cap."""

    resource: str
    limit: int
    where: str

    def __init__(self, resource: str, limit: int, where: str) -> None:
        super().__init__(
            f"{where} has reached its limit of {limit} {resource}",
            resource=resource,
            limit=limit,
            where=where,
        )


# -- transport ---------------------------------------------------------------------------
class TransportError(ChannelError):
    """A peer could not be reached or did not answer in time."""


class BrokerUnavailable(TransportError):
    """No broker answers for the channel (or no name server at the address)."""

    what: str
    reason: str

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}", what=what, reason=reason)


# -- waiting for work ------------------------------------------------------------------
class ProcessingTimeout(ChannelError, TimeoutError):
    """A publisher's events were still not all processed when its wait ran out of time
    (``Publisher.wait``). Also a builtin ``TimeoutError``, so ``except TimeoutError`` works.

    Attributes: ``channel``, ``publisher_id``, ``timeout_s``, ``outstanding`` (deliveries
    still owed: ``queued`` + ``in_flight``), ``dead_letters`` (its events given up on) and
    ``unserved`` (group -> its events queued there with no active member to take them).
    """

    channel: str
    publisher_id: str
    timeout_s: float
    outstanding: int
    queued: int
    in_flight: int
    dead_letters: int
    unserved: dict[str, int]

    def __init__(
        self,
        channel: str,
        publisher_id: str,
        timeout_s: float,
        queued: int,
        in_flight: int,
        dead_letters: int = 0,
        unserved: dict[str, int] | None = None,
    ) -> None:
        outstanding = queued + in_flight
        unserved = dict(unserved or {})
        hint = "" if in_flight else "; none in flight: is a subscriber running?"
        if unserved:
            groups = ", ".join(f"{group!r} ({n})" for group, n in sorted(unserved.items()))
            hint = (
                f"; queued in groups with no subscriber: {groups}. Each group gets every "
                "event, so a subscriber of another group does not take them: subscribe one "
                "in each of these groups (group=None: the default group of a queue)"
            )
        dead = f"; {dead_letters} dead-lettered" if dead_letters else ""
        super().__init__(
            f"{outstanding} events of publisher {publisher_id!r} on {channel!r} not processed "
            f"after {timeout_s:g} s ({queued} queued, {in_flight} in flight){dead}{hint}",
            channel=channel,
            publisher_id=publisher_id,
            timeout_s=timeout_s,
            outstanding=outstanding,
            queued=queued,
            in_flight=in_flight,
            dead_letters=dead_letters,
            unserved=unserved,
        )


# -- storage -----------------------------------------------------------------------------
class StoreError(ChannelError):
    """The backup store cannot be opened, read or written (damaged, locked, full)."""

    path: str
    reason: str

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"store {path}: {reason}", path=path, reason=reason)


class LeaseLost(BrokerUnavailable):
    """This broker no longer holds the channel's lease (another broker took it over, or it
    was moved): the database refused the write. A BrokerUnavailable, so a client retries
    through the name server and finds the new owner."""

    channel: str

    def __init__(self, channel: str) -> None:
        super().__init__(f"channel {channel}", "this broker lost its lease; another owns it now")
        self.channel = channel


ALL_ERRORS: tuple[type[ChannelError], ...] = (
    ChannelError,
    ClientError,
    InvalidEvent,
    InvalidArgument,
    UnknownChannel,
    SubscriberIdInUse,
    NotSubscribed,
    MemberActive,
    NotAuthorized,
    ChannelConflict,
    ChannelInUse,
    FaultInjectionDisabled,
    CapacityError,
    QueueFull,
    LimitReached,
    TransportError,
    BrokerUnavailable,
    ProcessingTimeout,
    StoreError,
    LeaseLost,
)
