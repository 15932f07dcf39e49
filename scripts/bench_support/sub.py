"""A bench subscriber: records per-event latency in memory, writes a JSON summary on stop.

Run by ``scripts/bench.py`` and ``scripts/bench_faults.py`` (by path)::

    python scripts/bench_support/sub.py --ns-port P --channel bench --id s1 --out s1.json

Latency is ``time.time() - event["timestamp"]`` measured in the handler (publish time to
handler, same machine clock). Prints ``bench-sub <id> ready`` once subscribed, stops on
SIGTERM / SIGINT (the library's graceful stop: finish the batch in hand, ack, unsubscribe),
then writes ``--out``: count, duplicates, first/last receive time and the latencies (all of
them up to ``--max-samples``, then a uniform reservoir sample). ``--keep-ids`` adds the ids
processed (``ids``), ``--trace`` a row per event in arrival order (``trace``: receive time,
publisher id, partition, id, attempt), both for the fault benchmarks.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any

from subscriber.client import Subscriber

STOP_CHECK_S = 1.0


class Recorder:
    """Counts events and keeps their latencies; called from the subscriber's worker."""

    def __init__(
        self, skip_prefix: str, max_samples: int, keep_ids: bool = False, trace: bool = False
    ) -> None:
        self.skip_prefix = skip_prefix
        self.skip_id = f"{skip_prefix}-"
        """Warm-up events published under the run's own publisher id have ids with it."""
        self.max_samples = max_samples
        self.keep_ids = keep_ids
        self.trace: list[tuple[float, str, Any, str, int]] | None = [] if trace else None
        self.count = 0
        self.skipped = 0
        self.duplicates = 0
        self.first_recv: float | None = None
        self.last_recv: float | None = None
        self.latencies = array("d")
        self._seen: set[str] = set()
        self._rng = random.Random(1)

    def handle(self, event: dict[str, Any]) -> None:
        now = time.time()
        if self.skip_prefix and (
            event["publisher_id"].startswith(self.skip_prefix)
            or event["id"].startswith(self.skip_id)
        ):
            self.skipped += 1
            return
        event_id = event["id"]
        if event_id in self._seen:
            self.duplicates += 1
        else:
            self._seen.add(event_id)
        self.count += 1
        if self.first_recv is None:
            self.first_recv = now
        self.last_recv = now
        if self.trace is not None:
            self.trace.append(
                (now, event["publisher_id"], event["partition"], event_id, event["attempt"])
            )
        latency = now - event["timestamp"]
        if len(self.latencies) < self.max_samples:
            self.latencies.append(latency)
        else:  # reservoir sampling keeps a uniform sample of every latency seen
            slot = self._rng.randrange(self.count)
            if slot < self.max_samples:
                self.latencies[slot] = latency

    def summary(self, subscriber_id: str) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.keep_ids:
            extra["ids"] = sorted(self._seen)
        if self.trace is not None:
            extra["trace"] = self.trace
        return extra | {
            "id": subscriber_id,
            "count": self.count,
            "skipped": self.skipped,
            "duplicates": self.duplicates,
            "first_recv": self.first_recv,
            "last_recv": self.last_recv,
            "sampled": len(self.latencies) < self.count,
            "latencies": [round(x, 6) for x in self.latencies],
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns-host", default="127.0.0.1")
    parser.add_argument("--ns-port", type=int, required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--id", required=True, dest="subscriber_id")
    parser.add_argument("--out", type=Path, required=True, help="JSON summary written on stop")
    parser.add_argument("--prefetch", type=int, default=None)
    parser.add_argument(
        "--skip-publisher",
        default="warmup",
        help="ignore events of publishers whose id starts with this (default %(default)s)",
    )
    parser.add_argument("--max-samples", type=int, default=1_000_000)
    parser.add_argument("--keep-ids", action="store_true", help="list the ids processed")
    parser.add_argument("--trace", action="store_true", help="a row per event received")
    args = parser.parse_args(argv)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    recorder = Recorder(args.skip_publisher, args.max_samples, args.keep_ids, args.trace)
    subscriber = Subscriber(
        args.channel,
        args.subscriber_id,
        recorder.handle,
        prefetch=args.prefetch,
        ns_host=args.ns_host,
        ns_port=args.ns_port,
    )
    try:
        info = subscriber.start()
        print(
            f"bench-sub {args.subscriber_id} ready (prefetch {info.get('prefetch')})",
            flush=True,
        )
        while not stop.wait(STOP_CHECK_S):
            pass
    finally:
        try:
            subscriber.stop()
        finally:
            tmp = args.out.with_suffix(".tmp")
            tmp.write_text(json.dumps(recorder.summary(args.subscriber_id)))
            tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
