"""A work queue in one script: 1,000 jobs handed out evenly to 4 workers, then a wait until
every job is done.

Start a broker first (it starts a name server on 127.0.0.1:9090), then run the script:

    python -m channel_server serve
    python examples/jobs.py                       # 4 workers, 1,000 jobs
    python examples/jobs.py --workers 6 --jobs 5000

The workers are Subscribers in this process (threads), to keep the example in one file;
in real use each runs the same few lines in a process of its own, on any machine that
reaches the name server. The jobs are published without a partition, so they are spread
round robin over the publisher's 16 partitions and every worker gets a fair share;
``Publisher.wait`` returns once every job was processed. Run it again: the publisher's ids
go on from where the last run stopped (kept in the state dir), so the new jobs are new.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from publisher import Publisher
from subscriber import Subscriber


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="default %(default)s")
    parser.add_argument("--jobs", type=int, default=1000, help="default %(default)s")
    parser.add_argument("--work-ms", type=float, default=2.0, help="time one job takes")
    parser.add_argument("--channel", default="jobs", help="default %(default)s")
    parser.add_argument("--ns-host", default="127.0.0.1", help="default %(default)s")
    parser.add_argument("--ns-port", type=int, default=9090, help="default %(default)s")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait at most")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    where = {"ns_host": args.ns_host, "ns_port": args.ns_port}
    done_by: Counter[str] = Counter()  # worker -> jobs it did
    times_done: Counter[int] = Counter()  # job -> how many times it was done
    lock = threading.Lock()  # handlers run on each worker's own thread

    def worker(name: str) -> Callable[[dict[str, Any]], None]:
        def handle(event: dict[str, Any]) -> None:
            time.sleep(args.work_ms / 1000)  # the job itself
            with lock:
                done_by[name] += 1
                times_done[event["payload"]["job"]] += 1

        return handle

    started = time.perf_counter()
    with ExitStack() as workers:  # each worker stops gracefully at the end
        for n in range(args.workers):
            name = f"worker-{n}"
            workers.enter_context(
                Subscriber(args.channel, name, handler=worker(name), create=True, **where)
            )
        with Publisher(args.channel, "jobs", create=True, **where) as pub:
            summary = pub.publish([pub.event({"job": job}) for job in range(args.jobs)])
            pub.wait(timeout_s=args.timeout)  # ProcessingTimeout if the jobs take longer
    elapsed = time.perf_counter() - started

    for name in sorted(done_by):
        print(f"{name}: {done_by[name]} jobs")
    missing = args.jobs - len(times_done)
    repeated = sum(1 for times in times_done.values() if times > 1)
    print(
        f"{summary['accepted']} jobs published, {done_by.total()} done in {elapsed:.2f} s: "
        f"{missing} missing, {repeated} done more than once"
    )
    return 0 if summary["accepted"] == args.jobs and not missing and not repeated else 1


if __name__ == "__main__":
    raise SystemExit(main())
