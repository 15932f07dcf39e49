#!/usr/bin/env python
"""What watching costs: bench.py's throughput run without the HTTP monitor, then with
``--http`` and a scraper reading ``/metrics`` (and the page's ``/api/channels/NAME``)
every second, alternating, the pairs' ratio printed with its median.

The counters and histograms the metrics read are kept in both runs (they are always on);
the last lines print what they cost per event, measured in this process on the core.
Run it with the project's venv:  .venv/bin/python scripts/bench_metrics.py  (see --help).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import bench
from bench_support.procs import free_port, load_average
from bench_support.service import CHANNEL

SCRAPE_EVERY_S = 1.0
"""A scrape a second: 15 times Prometheus's default pace, so the cost is not missed."""


class Scraper:
    """Reads the monitor's metrics and the channel's JSON every ``SCRAPE_EVERY_S`` until
    stopped; counts the scrapes that answered (the broker starts after it does)."""

    def __init__(self, port: int) -> None:
        from channel_server.credentials import read_monitor_token
        from channel_server.private_files import default_state_dir

        token = read_monitor_token(default_state_dir())
        self._headers = {"Authorization": f"Bearer {token}"}
        self._urls = [
            f"http://127.0.0.1:{port}/{p}" for p in ("metrics", f"api/channels/{CHANNEL}")
        ]
        self._stop = threading.Event()
        self.answered = 0
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10.0)

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_EVERY_S):
            for url in self._urls:
                try:
                    request = urllib.request.Request(url, headers=self._headers)
                    with urllib.request.urlopen(request, timeout=5) as reply:
                        reply.read()
                    self.answered += 1
                except OSError:
                    pass  # not listening yet, or between runs


def core_cost_us(events: int = 100_000) -> float:
    """Microseconds per event the always-on instruments add in the core: a histogram
    observation per acked event (the counters are a few additions per batch)."""
    from channel_server.core.histogram import LATENCY_BUCKETS_S, Histogram

    hist, values = Histogram(LATENCY_BUCKETS_S), [0.001 * (i % 500) for i in range(events)]
    started = time.perf_counter()
    hist.observe_many(values)
    return (time.perf_counter() - started) / events * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_metrics", description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="off/on pairs (default 5)")
    parser.add_argument("--events", type=int, default=100_000, help="per run (default 100000)")
    args = parser.parse_args(argv)
    print(f"1-minute load average at start: {load_average()}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        base = bench.settings_from_args(bench.build_parser().parse_args([]), Path(tmp))
        base = replace(base, events=args.events)
        ratios = []
        for pair in range(1, args.pairs + 1):
            off = bench.pipeline_run(base, "off", pair, base.events, base.batch_size)
            port = free_port()
            on_settings = replace(base, broker_args=["--http", f"127.0.0.1:{port}"])
            with Scraper(port) as scraper:
                on = bench.pipeline_run(on_settings, "on", pair, base.events, base.batch_size)
            ratio = on["events_per_s"] / off["events_per_s"]
            ratios.append(ratio)
            print(
                f"pair {pair}: off {off['events_per_s']:,.0f} ev/s, on {on['events_per_s']:,.0f} "
                f"ev/s ({scraper.answered} scrapes answered): on/off {ratio:.3f}"
            )
    print(f"median on/off over {len(ratios)} pairs: {statistics.median(ratios):.3f}")
    print(f"always-on instruments in the core: {core_cost_us():.3f} µs per acked event")
    return 0


if __name__ == "__main__":
    sys.exit(main())
