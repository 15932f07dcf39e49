"""Push subscriber: its own Pyro5 daemon receives batches; the reply is the ack.

Threads: the daemon's request loop (owned here) runs ``receive`` in a Pyro5 worker; the
thread that calls start/stop owns the channel proxy. ``_busy`` is held while a batch is
processed, so a graceful stop can wait for the event in hand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import Pyro5.api
import Pyro5.server

from channel_server.lookup import resolve_channel
from channel_server.wire import (
    DEFAULT_HOST,
    DEFAULT_NS_PORT,
    check_name,
    make_proxy,
)
from subscriber.faults import Faults
from subscriber.processed import ProcessedIds
from subscriber.record import Recorder

log = logging.getLogger(__name__)
Handler = Callable[[dict[str, Any]], None]
"""Called once per event dict (id, publisher_id, partition, timestamp, payload, offset,
attempt). Raising nacks that event only."""
DEFAULT_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


class _Receiver:
    """The callback object the channel pushes to."""

    def __init__(self, subscriber: Subscriber) -> None:
        self._subscriber = subscriber

    @Pyro5.api.expose
    def receive(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        return self._subscriber.process(batch)

    @Pyro5.api.expose
    def ping(self) -> str:
        return self._subscriber.subscriber_id


class Subscriber:
    """Subscribes to a channel and runs ``handler`` on each pushed event, in order."""

    def __init__(
        self,
        channel: str,
        subscriber_id: str,
        handler: Handler,
        *,
        group: str | None = None,
        prefetch: int | None = None,
        ns_host: str = DEFAULT_HOST,
        ns_port: int = DEFAULT_NS_PORT,
        host: str = DEFAULT_HOST,
        port: int = 0,
        recorder: Recorder | None = None,
        faults: Faults | None = None,
        processed: ProcessedIds | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.channel = check_name("channel", channel)
        self.subscriber_id = check_name("subscriber_id", subscriber_id)
        self.group = None if group is None else check_name("group", group)
        """None: the channel's choice (``default`` on a queue, an own group on a topic)."""
        self.prefetch = prefetch
        self._handler = handler
        self._ns = (ns_host, ns_port)
        self._bind = (host, port)
        self._recorder = recorder
        self._faults = faults or Faults([])
        self._processed = processed if processed is not None else ProcessedIds()
        self._timeout_s = timeout_s
        self._stopping = threading.Event()
        self._busy = threading.Lock()
        """Held while a batch is being processed."""
        self._daemon: Pyro5.server.Daemon | None = None
        self._loop: threading.Thread | None = None
        self._proxy: Pyro5.api.Proxy | None = None
        self.uri = ""
        self.processed = 0

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        """Serve the callback, then subscribe. Returns the channel's answer."""
        self._daemon = Pyro5.server.Daemon(host=self._bind[0], port=self._bind[1])
        receiver = _Receiver(self)
        self.uri = str(self._daemon.register(receiver, f"subscriber.{self.subscriber_id}"))
        self._loop = threading.Thread(
            target=self._daemon.requestLoop, name=f"subscriber-{self.subscriber_id}", daemon=True
        )
        self._loop.start()
        channel_uri = resolve_channel(*self._ns, self.channel)
        self._proxy = make_proxy(channel_uri, self._timeout_s)
        info = self._proxy.subscribe(self.subscriber_id, self.uri, self.group, self.prefetch)
        self.group = info["group"]
        return info

    def stop(self, unsubscribe: bool = True) -> None:
        """Graceful stop: finish the event in hand, reply with what was done, unsubscribe
        so the rest moves at once, then close the daemon."""
        self._stopping.set()
        if self._busy.acquire(timeout=STOP_TIMEOUT_S):
            self._busy.release()
        if self._proxy is not None:
            if unsubscribe:
                self._unsubscribe()
            self._proxy._pyroRelease()
        if self._daemon is not None:
            self._daemon.shutdown()
            if self._loop is not None:
                self._loop.join(STOP_TIMEOUT_S)
            self._daemon.close()
        if self._recorder is not None:
            self._recorder.close()
        self._processed.close()

    def _unsubscribe(self) -> None:
        """Leave the group; once more through the name server if the broker moved (a
        restarted broker serves the channel at a new address)."""
        for attempt in range(2):
            try:
                if attempt:
                    self._proxy._pyroRelease()
                    self._proxy = make_proxy(
                        resolve_channel(*self._ns, self.channel), self._timeout_s
                    )
                self._proxy.unsubscribe(self.subscriber_id, self.group)
                return
            except Exception as exc:  # the broker may be gone; stopping goes on
                log.warning("unsubscribe failed: %s", exc)

    # -- processing ----------------------------------------------------------------------
    def process(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        """Run the handler on each event in order; the reply lists acked and nacked ids.

        An event processed before (its ack was lost) is acknowledged without running the
        handler again. When stopping, events after the one in hand are left out (they
        are redelivered).
        """
        acked: list[str] = []
        nacked: dict[str, str] = {}
        with self._busy:
            done: list[str] = []
            for event in batch:
                if self._stopping.is_set():
                    break
                if event["id"] in self._processed:
                    log.info("%s was processed already: acknowledged again", event["id"])
                elif self._handle(event, nacked):
                    done.append(event["id"])
                elif self._stopping.is_set():
                    break  # stopped while the event was still on its way in: not in hand
                else:
                    continue
                if not self._faults.drop_ack(event):
                    acked.append(event["id"])
            self._processed.add(done)  # on disk (with a state dir) before the reply
        return {"acked": acked, "nacked": nacked}

    def _handle(self, event: dict[str, Any], nacked: dict[str, str]) -> bool:
        """Run the handler once; False when it failed (nacked) or stopping intervened."""
        self._faults.before(event)
        if self._stopping.is_set():
            return False
        try:
            self._faults.check_poison(event)
            self._handler(event)
        except Exception as exc:
            nacked[event["id"]] = f"{type(exc).__name__}: {exc}"
            log.warning("handler failed on %s: %s", event["id"], exc)
            return False
        self.processed += 1
        if self._recorder is not None:
            self._recorder.write(event)
        return True
