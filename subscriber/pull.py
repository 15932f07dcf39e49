"""The classic pull client: subscribe / unsubscribe / get / topics (DESIGN §4, §12).

``get`` sends the uid (``publisher_id/id``) of the last message received; the channel
acknowledges it and hands out the next one, or the same one again when the reply was lost
and the client retries with the same last uid. The last message per topic is journaled
(subscriber.received) before it is shown, so a crash of the client neither loses nor
repeats one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import Pyro5.errors

from channel_client.per_topic import PerTopic
from channel_client.remote import DEFAULT_ATTEMPTS, DEFAULT_TIMEOUT_S, ClientOptions, RemoteChannel
from channel_client.reply_spin import CALLER_SPIN_S
from channel_client.statefile import StateFile, state_path
from channel_server.errors import ChannelError
from channel_server.events import event_uid
from channel_server.private_files import default_state_dir
from channel_server.wire import (
    DEFAULT_HOST,
    DEFAULT_NS_PORT,
    NS_CHANNEL_PREFIX,
    check_name,
    locate_ns,
    make_proxy,
)
from subscriber.received import ReceivedJournal

log = logging.getLogger(__name__)
TOPIC_KIND = "topic"
LISTING_TIMEOUT_S = 3.0


class PullClient:
    """One subscriber id's classic subscriptions; its proxies belong to the calling thread."""

    def __init__(self, subscriber_id: str, state_dir: Path, options: ClientOptions) -> None:
        """InvalidArgument for an id that is not a name, before any file is touched;
        StoreError naming a state file that is not what it should be."""
        self.subscriber_id = check_name("subscriber_id", subscriber_id)
        self.options = options
        self.state = StateFile(state_path(state_dir, "subscriber", subscriber_id, suffix=".json"))
        """Scenario progress."""
        journal = state_path(state_dir, "subscriber", subscriber_id, suffix=".received")
        self.received = ReceivedJournal(journal)
        self._remotes = PerTopic(self._make, RemoteChannel.release, options.drop_replies)
        self._groups: dict[str, str | None] = {}
        """The group each topic was got from in this run (what ``close`` releases in)."""

    def _make(self, topic: str, drop_replies: int, create: bool) -> RemoteChannel:
        options = dataclasses.replace(self.options, drop_replies=drop_replies)
        return RemoteChannel(options, topic, create=create, kind=TOPIC_KIND, awake=True)

    def _remote(self, topic: str, create: bool = False) -> RemoteChannel:
        return self._remotes.get(topic, create)

    def subscribe(self, topic: str, group: str | None = None) -> dict[str, Any]:
        """Subscribe (idempotent); the topic is created when new."""
        return self._remote(topic, create=True).call("subscribe", self.subscriber_id, None, group)

    def unsubscribe(self, topic: str, group: str | None = None) -> bool:
        """Leave (idempotent), the last message got acknowledged first; pending messages
        of an own group are dropped with it."""
        last = self.received.last_uid(topic)
        left = self._remote(topic).call("unsubscribe", self.subscriber_id, group, None, last)
        self.received.record(topic, None)
        self._groups.pop(topic, None)  # nothing to release at close
        self._remotes.drop(topic)  # its connection, which the broker counts against us
        return left

    def get(self, topic: str, group: str | None = None) -> dict[str, Any]:
        """The next message: ``{"status": "message", "event": ...}`` or ``{"status":
        "empty"}``; raises NotSubscribed. A message got before (a broker killed before it
        wrote that ack hands it out again) is acknowledged by the next get and not shown:
        the channel is told this client absorbs such repeats, and spares a write per get."""
        last = self.received.last_uid(topic)
        self._groups[topic] = group
        while True:
            reply = self._remote(topic).call("get", self.subscriber_id, last, group, True)
            if reply["status"] != "message":
                return reply
            event = reply["event"]
            repeat = self.received.seen(topic, event)
            self.received.record(topic, event)  # before it is shown
            if not repeat:
                return reply
            log.info("%s on %s was got before: acknowledged again", event["id"], topic)
            last = event_uid(event["publisher_id"], event["id"])

    def topics(self) -> list[dict[str, Any]]:
        """Every subscription of this id, asked of every channel in the name server."""
        o = self.options
        with locate_ns(o.ns_host, o.ns_port) as ns:
            channels = ns.list(prefix=NS_CHANNEL_PREFIX)
        found: list[dict[str, Any]] = []
        for name, uri in sorted(channels.items()):
            try:
                with make_proxy(uri, LISTING_TIMEOUT_S) as channel:
                    found.extend(channel.memberships(self.subscriber_id))
            except Pyro5.errors.CommunicationError:
                found.append({"channel": name[len(NS_CHANNEL_PREFIX) :], "unreachable": True})
        return found

    @classmethod
    def open(
        cls,
        subscriber_id: str,
        *,
        ns_host: str = DEFAULT_HOST,
        ns_port: int = DEFAULT_NS_PORT,
        state_dir: str | os.PathLike[str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        attempts: int = DEFAULT_ATTEMPTS,
        reply_spin_s: float = CALLER_SPIN_S,
    ) -> PullClient:
        """The library's way in (docs/api.md): ``state_dir`` keeps the last message
        received per topic (None: this user's state dir), so a restarted client neither
        loses nor repeats one; a call that gets no answer is tried ``attempts`` times;
        ``reply_spin_s``: the longest a call waits for a quick reply awake, where that is
        seen to pay (:mod:`~channel_client.reply_spin`; 0: never)."""
        where = Path(state_dir) if state_dir is not None else default_state_dir()
        options = ClientOptions(ns_host, ns_port, attempts, timeout_s, reply_spin_s=reply_spin_s)
        return cls(subscriber_id, where, options)

    def __enter__(self) -> PullClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Tell each topic got from in this run that this client closed: the last message
        got is acknowledged and the client is inactive until its next ``get``, so a
        group's other members take its part now, not after ``--pull-timeout``, and do not
        get that message again (session 36's newcomer). Then close the connections and
        the journal; the subscriptions stay (``unsubscribe`` ends one). A broker that
        cannot be told gets the ack from this id's next ``get``, as after a crash."""
        try:
            for topic, group in self._groups.items():
                self._release(topic, group)
        finally:
            self._remotes.close()
            self.received.close()

    def _release(self, topic: str, group: str | None) -> None:
        try:
            last = self.received.last_uid(topic)
            self._remote(topic).call("release", self.subscriber_id, group, last)
        except (ChannelError, Pyro5.errors.PyroError) as exc:  # (an older broker: no call)
            log.warning("could not tell %s that this client closed: %s", topic, exc)
