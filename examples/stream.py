"""Events that arrive one at a time, from several threads: ``Publisher.submit``.

A web service's request handlers each have one event to publish. ``publish`` would cost
each of them a round trip to the broker; ``submit`` returns at once with a Future, and the
Publisher's sender thread sends whatever was submitted meanwhile as one batch. The
handlers here are threads sharing one Publisher (``event`` and ``submit`` may be called
from any thread); a Subscriber in this process counts what it is given.

Start a broker first (it starts a name server on 127.0.0.1:9090), then run the script:

    python -m channel_server serve
    python examples/stream.py                        # 8 handlers, 20,000 events
    python examples/stream.py --handlers 4 --events 100000
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from concurrent.futures import Future
from typing import Any

from publisher import Publisher
from subscriber import Subscriber


def handle_requests(pub: Publisher, handler: int, count: int) -> list[Future[dict[str, Any]]]:
    """One request handler: an event per request, submitted as it comes (never waited on
    here: the futures are looked at once all are in)."""
    futures = []
    for request in range(count):
        event = pub.event({"handler": handler, "request": request}, partition=handler)
        futures.append(pub.submit([event]))
    return futures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--handlers", type=int, default=8, help="threads submitting (8)")
    parser.add_argument("--events", type=int, default=20_000, help="events in all (20000)")
    parser.add_argument("--ns-port", type=int, default=9090, help="the name server's port")
    args = parser.parse_args()
    where = {"ns_host": "127.0.0.1", "ns_port": args.ns_port}
    seen: Counter[int] = Counter()
    lock = threading.Lock()

    def count(event: dict[str, Any]) -> None:
        with lock:
            seen[event["payload"]["handler"]] += 1

    per_handler = args.events // args.handlers
    with (
        Subscriber("clicks", "counter", handler=count, create=True, **where),
        Publisher("clicks", "web", create=True, **where) as pub,
    ):
        started = time.perf_counter()
        results: list[list[Future[dict[str, Any]]]] = [[] for _ in range(args.handlers)]

        def run(handler: int) -> None:
            results[handler] = handle_requests(pub, handler, per_handler)

        threads = [threading.Thread(target=run, args=(h,)) for h in range(args.handlers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        pub.flush()  # every submission stored (or failed: see its future)
        stored = sum(f.result()["accepted"] for futures in results for f in futures)
        stored_s = time.perf_counter() - started
        pub.wait(timeout_s=60)  # and processed
    print(f"{stored} events submitted by {args.handlers} handlers, stored in {stored_s:.2f} s")
    for handler in sorted(seen):
        print(f"handler-{handler}: {seen[handler]} events processed")


if __name__ == "__main__":
    main()
