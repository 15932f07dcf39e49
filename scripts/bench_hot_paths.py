#!/usr/bin/env python
"""What the broker and a subscriber spend per event on the hot paths, in one process
(issue 16): the costs a profile of the service spreads over threads, measured one by one.

  validate      a published batch of 100 dicts (100 B payloads) to Events: msgspec's shape
                check plus the short Python pass (what ``validate_batch`` does), against
                the field-by-field Python checks alone (``validate_each``, the rule it
                falls back to)
  publish       a publish call of 100 events decoded and its batch validated: as a list
                of event maps (the call decoder, then ``validate_batch``), and packed as
                the library sends it (``pack_batch``; the call decoder, then
                ``validate_packed``: envelopes decoded into structs)
  number        validated events given their offsets under the channel lock (copies)
  window        the delivered-ID window: a million uids added in publishes of 100
                through a window of 100,000 (adds and expiry)
  acks          an ack message's 100 uids checked at the RPC boundary
  push-wire     a push's 100 events turned into the dicts the subscriber receives; a
                whole push encoded in the plain form (a map per event) and packed
                (``Batch.to_wire_packed``: a struct per event, encoded in C)
  records       the per-event records: a broker's Flight, a subscriber's inbox Item and
                outbox Outcome
  subscriber    a subscriber's worker on a push of 100 events: taken in, the handler (a
                no-op) run on each, the outcomes in the outbox and their uids in the
                processed-ID window (``Subscriber._take_in``, ``_handle``)

Each figure is the best of ``--repeat`` timings, in µs per event. Pure CPU in one thread:
steadier than an end-to-end run on a shared machine, but it says nothing about threads,
sockets or the GIL. Run it with the project's venv:
  .venv/bin/python scripts/bench_hot_paths.py
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from channel_server import boundary
from channel_server.core.channel_core import _numbered
from channel_server.core.dedupe import DeliveredIds
from channel_server.core.member import Batch, Flight
from channel_server.events import (
    event_uid,
    pack_batch,
    validate_batch,
    validate_each,
    validate_packed,
)
from channel_server.unpacking import unpack_strict
from subscriber.client import Subscriber
from subscriber.inbox import Item, Outcome
from subscriber.processed import ProcessedIds

BATCH = 100
WINDOW_IDS = 1_000_000
WINDOW_SIZE = 100_000


def published(count: int) -> list[dict[str, object]]:
    return [
        {
            "id": f"PUB-{i}",
            "publisher_id": "bench-pub",
            "partition": i % 16,
            "timestamp": 1.7e9 + i,
            "payload": "x" * 100,
        }
        for i in range(count)
    ]


def fill_window(uids: list[str]) -> None:
    window = DeliveredIds(WINDOW_SIZE, 3600.0)
    for start in range(0, len(uids), BATCH):
        window.add_many(uids[start : start + BATCH], 1000.0 + start * 1e-5)


def decoded_and_validated(argument: object) -> Callable[[], object]:
    """A publish call as the broker reads it: decoded strictly, then its batch validated
    the way its form asks for."""
    call = msgpack.packb(["channel.bench", "publish", [argument], {}], use_bin_type=True)

    def one_call() -> object:
        batch = unpack_strict(call)[2][0]
        return validate_packed(batch) if type(batch) is bytes else validate_batch(batch)

    return one_call


def subscriber_worker(batch: list[dict[str, object]]) -> Callable[[], object]:
    """A push through a subscriber's worker (no threads, no network). The window starts
    empty each time (a set and a deque made per push), so no event is a duplicate."""
    subscriber = Subscriber("bench", "bench-sub", lambda event: None)
    push = {"session": 1, "seq": 1, "events": batch}

    def one_push() -> None:
        subscriber._processed = ProcessedIds()
        subscriber._take_in(push)
        subscriber._handle(subscriber._inbox.take_all(0.0))
        subscriber._outbox.drain()

    return one_push


def cases() -> list[tuple[str, int, Callable[[], object]]]:
    """(name, events per call, the call)."""
    batch = published(BATCH)
    events = validate_batch(batch)
    pushed = [dict(ev, offset=i, attempt=1) for i, ev in enumerate(batch)]
    uids = [event_uid("bench-pub", f"PUB-{i}") for i in range(WINDOW_IDS)]
    acked = uids[:BATCH]
    attempts = [1] * BATCH
    numbered = _numbered(events, 0, 1.0)
    push = Batch("default", "bench-sub", 1, 1, numbered, attempts)
    return [
        ("validate: msgspec + Python pass", BATCH, lambda: validate_batch(batch)),
        ("validate: the field checks alone", BATCH, lambda: validate_each(batch)),
        ("publish: a list decoded and validated", BATCH, decoded_and_validated(batch)),
        (
            "publish: a packed batch decoded and validated",
            BATCH,
            decoded_and_validated(pack_batch(batch)),
        ),
        ("number: offsets under the lock", BATCH, lambda: _numbered(events, 0, 1.0)),
        ("window: add and expire", WINDOW_IDS, lambda: fill_window(uids)),
        ("acks: uids checked", BATCH, lambda: boundary.check_acks(acked, {}, 10_000)),
        (
            "push-wire: event dicts",
            BATCH,
            lambda: [e.to_dict(a) for e, a in zip(events, attempts, strict=True)],
        ),
        (
            "push-wire: the plain push packed by msgpack",
            BATCH,
            lambda: msgpack.packb(push.to_wire()),
        ),
        ("push-wire: the packed push", BATCH, lambda: msgpack.packb(push.to_wire_packed())),
        ("records: Flight", 1, lambda: Flight(events[0], 1, 7, 1.0)),
        ("records: Item", 1, lambda: Item(1, 7, batch[0])),
        ("records: Outcome", 1, lambda: Outcome(1, 7, acked[0])),
        ("subscriber: a push handled", BATCH, subscriber_worker(pushed)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timings per case (5)")
    parser.add_argument("--seconds", type=float, default=0.3, help="per timing (0.3)")
    args = parser.parse_args(argv)
    print(f"| path | µs per event (best of {args.repeat}) |")
    print("|---|---|")
    for name, per_call, call in cases():
        elapsed = timeit.timeit(call, number=1)
        number = max(1, int(args.seconds / max(elapsed, 1e-9)))
        best = min(timeit.repeat(call, number=number, repeat=args.repeat)) / number
        print(f"| {name} | {best / per_call * 1e6:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
