#!/usr/bin/env python
"""How long a channel is away when its broker dies, with brokers sharing one PostgreSQL
database (issue 18): SIGKILL of the owner -> events flowing again at the subscriber.

Each run: a throwaway PostgreSQL server (tests/pgcluster.py), a name server, broker b1
owning the channel, standby b2, one subscriber, a publisher at ``--rate`` events/s. After
``--warm-s`` the owner is SIGKILLed; the figure is the time from the kill to the first event
the subscriber records that was published after the last one it had before the kill.
Also printed: when the standby logged the take-over. Fresh processes and a fresh database
every run; the median of ``--runs`` is what to quote.

  .venv/bin/python scripts/bench_failover.py --runs 5 --lease 6
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.chaos.harness import read_records
from tests.integration.procs import Cluster, wait_until
from tests.pgcluster import start_cluster

CHANNEL = "failover"
TAKE_OVER_LINE = r"taking over channel failover from b1"


def seq(record: dict) -> int:
    return int(record["id"].rsplit("-", 1)[1])


def one_run(dsn: str, workdir: Path, lease_s: float, rate: float, warm_s: float) -> dict:
    cluster = Cluster(workdir)
    try:
        cluster.start("ns", ["-m", "channel_server", "nameserver", *cluster.ns], "ready at")
        store = ("--store", dsn, "--lease", str(lease_s))
        owner = cluster.broker(CHANNEL, extra=(*store, "--broker-id", "b1"), name="b1")
        standby = cluster.broker(extra=(*store, "--broker-id", "b2"), name="b2")
        cluster.subscriber(CHANNEL, "s1")
        count = int(rate * (warm_s + 4 * lease_s + 30))
        argv = [
            "-m", "publisher", "publish", *cluster.ns, "--channel", CHANNEL, "--id", "P",
            "--count", str(count), "--batch-size", "1", "--rate", str(rate),
            "--retry-for", "120",
        ]  # fmt: skip
        cluster.start("publisher", argv, ready=None)
        path = cluster.record_path(CHANNEL, "s1")
        wait_until(lambda: len(read_records(path)) >= rate * warm_s, warm_s + 30, "warm-up")
        last_before = max(seq(r) for r in read_records(path))
        killed_at = time.time()
        owner.popen.send_signal(signal.SIGKILL)
        standby.wait_for(TAKE_OVER_LINE, 4 * lease_s + 30)
        took_over_at = time.time()

        def resumed() -> float | None:
            later = [r["at"] for r in read_records(path) if seq(r) > last_before]
            return min(later) if later else None

        flowing_at = wait_until(resumed, 4 * lease_s + 60, "events after the kill")
        return {"flowing_s": flowing_at - killed_at, "take_over_seen_s": took_over_at - killed_at}
    finally:
        cluster.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs (default %(default)s)")
    parser.add_argument("--lease", type=float, default=6.0, help="serve --lease (default 6)")
    parser.add_argument("--rate", type=float, default=100.0, help="events/s published")
    parser.add_argument("--warm-s", type=float, default=3.0, help="flowing before the kill")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    server = start_cluster()  # its own temp dir, which the postgres user can enter
    rows = []
    try:
        for run in range(1, args.runs + 1):
            dsn = server.create_database(f"failover_{run}")
            row = one_run(dsn, root / f"run{run}", args.lease, args.rate, args.warm_s)
            rows.append(row)
            print(
                f"run {run}: take-over logged {row['take_over_seen_s']:.2f} s, events "
                f"flowing again {row['flowing_s']:.2f} s after the SIGKILL",
                flush=True,
            )
    finally:
        server.stop()
    print(f"\nfailover with --lease {args.lease:g} (median of {len(rows)} runs)")
    print("| measure | median | min | max |\n|---|---|---|---|")
    for key, label in (("take_over_seen_s", "kill -> take-over logged"),
                       ("flowing_s", "kill -> events flowing again")):  # fmt: skip
        values = [r[key] for r in rows]
        print(
            f"| {label} | {statistics.median(values):.2f} s | {min(values):.2f} s "
            f"| {max(values):.2f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
