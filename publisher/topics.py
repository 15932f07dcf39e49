"""The classic put (DESIGN §4, §12): one message to a topic, stored exactly once.

The put is journaled with its id before it is sent; a client restarted after a crash sends
it again first, and the channel's duplicate detection stores it once.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from channel_client.per_topic import PerTopic
from channel_client.remote import DEFAULT_ATTEMPTS, DEFAULT_TIMEOUT_S, ClientOptions
from channel_client.reply_spin import CALLER_SPIN_S
from channel_server.errors import StoreError
from channel_server.events import validate_batch
from channel_server.private_files import default_state_dir
from channel_server.wire import DEFAULT_HOST, DEFAULT_NS_PORT, check_name
from publisher.client import Publisher
from publisher.state import PublisherState

log = logging.getLogger(__name__)
TOPIC_KIND = "topic"


class Putter:
    """Puts messages to topics for one publisher id; topics are created on first use."""

    def __init__(self, publisher_id: str, state: PublisherState, options: ClientOptions) -> None:
        self.publisher_id = publisher_id
        self.state = state
        self.options = options
        self._publishers = PerTopic(self._make, Publisher.close, options.drop_replies)

    def _make(self, topic: str, drop_replies: int, _create: bool) -> Publisher:
        o = self.options
        publisher = Publisher(
            topic,
            self.publisher_id,
            ns_host=o.ns_host,
            ns_port=o.ns_port,
            create=True,  # a put creates its topic
            kind=TOPIC_KIND,
            partitions=1,  # one partition: gets return a topic's messages in put order
            timeout_s=o.timeout_s,
            state=self.state,
            retry_for_s=(o.attempts - 1) * 0.2,
            drop_replies=drop_replies,
            reply_spin_s=o.reply_spin_s,
        )
        publisher._warned_unrouted = True  # a put nobody subscribed to: its line says so
        return publisher

    def _publisher(self, topic: str) -> Publisher:
        return self._publishers.get(topic)

    def resend_pending(self) -> str | None:
        """Send again a plain put a crash interrupted; returns its outcome line, if any."""
        pending = self.state.pending_put()
        if pending is None or pending.get("key"):
            return None
        topic, event = pending["topic"], pending["event"]
        return self._send(self._publisher(topic), topic, event, keep_journal=False)

    def put(self, topic: str, message: Any, key: str | None = None) -> str:
        """Put one message; returns a line saying what happened to it. With ``key`` (a
        unit of work), a journaled put of the same key is sent again as it was."""
        publisher = self._publisher(topic)
        pending = self.state.pending_put()
        if key is not None and pending and pending.get("key") == key:
            event = pending["event"]
        else:
            event = publisher.event(message)
            validate_batch([event], max_payload_bytes=sys.maxsize)  # InvalidEvent, not kept
            self.state.journal_put(topic, event, publisher.next_seq, key)
            publisher.journaled(publisher.next_seq)
        return self._send(publisher, topic, event, keep_journal=key is not None)

    def _send(
        self, publisher: Publisher, topic: str, event: dict[str, Any], keep_journal: bool
    ) -> str:
        summary = publisher.publish([event])
        if not keep_journal:  # a keyed put stays journaled until the next unit replaces it
            self._forget_put(topic, event, publisher.next_seq)
        if summary.get("retried") or (summary["duplicates"] and not summary["accepted"]):
            return f"{event['id']} was already stored on {topic} (a retried put): stored once"
        if summary["accepted"]:
            return f"{event['id']} stored on {topic}"
        return f"{event['id']} not stored: {topic} has no subscribers"

    def _forget_put(self, topic: str, event: dict[str, Any], next_seq: int) -> None:
        """Clear the journal of a put the channel stored. A failure (a full disk) is only
        logged: the put is stored, and raising said it was not, so a retry stored it again
        (session 35's storage probe: 16 of 300 puts twice). Left journaled, it is sent
        again by ``resend_pending`` under its own id, and stored once."""
        try:
            self.state.journal_put(topic, None, next_seq)
            self._publisher(topic).journaled(next_seq)
        except StoreError as exc:
            log.warning("%s stored on %s; its journal entry stays (%s)", event["id"], topic, exc)

    @classmethod
    def open(
        cls,
        publisher_id: str,
        *,
        ns_host: str = DEFAULT_HOST,
        ns_port: int = DEFAULT_NS_PORT,
        state_dir: str | os.PathLike[str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        attempts: int = DEFAULT_ATTEMPTS,
        reply_spin_s: float = CALLER_SPIN_S,
    ) -> Putter:
        """The library's way in (docs/api.md): ``state_dir`` keeps the publisher's id
        sequence and the put in flight (None: this user's state dir), so a put a crash
        interrupted is sent again by ``resend_pending`` and stored once; ``reply_spin_s``:
        as ``Publisher``'s."""
        options = ClientOptions(ns_host, ns_port, attempts, timeout_s, reply_spin_s=reply_spin_s)
        where = Path(state_dir) if state_dir is not None else default_state_dir()
        state = PublisherState(where, check_name("publisher_id", publisher_id))
        return cls(publisher_id, state, options)

    def __enter__(self) -> Putter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections to every topic put to (a put journaled and not yet
        confirmed stays journaled for ``resend_pending``)."""
        self._publishers.close()
