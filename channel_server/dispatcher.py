"""One dispatcher thread per subscriber: it owns that subscriber's Pyro5 proxy.

A proxy belongs to one thread, and per-partition order needs one push at a time, so each
member gets exactly one thread that asks its channel for the next batch, pushes it with a
timeout outside the channel lock, and reports the reply (the ack) or the failure back.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from channel_server.config import ChannelConfig
from channel_server.core.group import Batch
from channel_server.wire import make_proxy

log = logging.getLogger(__name__)


class DispatchStopped(Exception):
    """The member left, was made inactive or resubscribed: this dispatcher must end."""


class BatchSource(Protocol):
    """What a dispatcher needs from its channel (the channel holds the lock)."""

    def next_batch(self, group: str, member_id: str, session: int) -> Batch | None:
        """A batch to push, or None after a quiet wait; raises DispatchStopped."""

    def push_done(self, group: str, batch: Batch, reply: Any, elapsed_s: float) -> None: ...

    def push_failed(self, group: str, batch: Batch, error: Exception) -> bool:
        """Returns True when the member was made inactive."""


class Dispatcher:
    """Pushes one member's batches, one at a time, until told to stop or made redundant."""

    def __init__(
        self,
        source: BatchSource,
        channel: str,
        group: str,
        member_id: str,
        session: int,
        callback: str,
        config: ChannelConfig,
    ) -> None:
        self._source = source
        self._group = group
        self._member_id = member_id
        self._session = session
        self._callback = callback
        self._config = config
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"dispatch-{channel}-{group}-{member_id}", daemon=True
        )

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end after its current push (the owner then joins it)."""
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _run(self) -> None:
        proxy = make_proxy(self._callback, self._config.ack_timeout_s)
        failures = 0
        try:
            while not self._stop.is_set():
                batch = self._source.next_batch(self._group, self._member_id, self._session)
                if batch is None:
                    continue
                try:
                    reply, elapsed = self._push(proxy, batch, probe_first=failures > 0)
                except Exception as exc:  # transport or remote failure: both are a failed push
                    failures += 1
                    if self._source.push_failed(self._group, batch, exc):
                        return
                    self._stop.wait(self._config.retry_backoff_s * 2 ** (failures - 1))
                    continue
                failures = 0
                self._source.push_done(self._group, batch, reply, elapsed)
        except DispatchStopped:
            pass
        except Exception:
            log.exception("dispatcher for %s/%s crashed", self._group, self._member_id)
        finally:
            proxy._pyroRelease()

    def _push(self, proxy: Any, batch: Batch, probe_first: bool) -> tuple[Any, float]:
        """One push; after a failed one, a short ping first, so that a frozen subscriber
        costs one ack timeout and then ``liveness_timeout_s`` per retry, not a timeout each
        (a slow but live one answers the ping at once and gets the batch again)."""
        if probe_first:
            with make_proxy(self._callback, self._config.liveness_timeout_s) as probe:
                probe.ping()  # raises when the subscriber does not answer
        started = time.monotonic()
        reply = proxy.receive(batch.to_wire())
        return reply, time.monotonic() - started
