#!/usr/bin/env python
"""Where a one-event publish goes (issue 16's batch-1 path): the same calls against three
servers, each in a process of its own, the server's CPU per call read from /proc.

  plain       a bare Pyro5 daemon (msgpack), a method that returns at once: the transport
  plain+core  a bare Pyro5 daemon whose method publishes into a real channel
              (EventChannel's publish path, SQLite store in a temp dir): transport + core
  broker      ``channel_server serve`` (authentication, bounded connections, strict
              decoding, the channel), called by the library's ``Publisher``: the service

No subscribers: what is measured is one publish round trip, not a push or an ack. Every
row's caller waits for its replies as ``Publisher.publish`` does (awake where that pays:
``channel_client/reply_spin.py``). Each row is the median of ``--runs`` runs of
``--calls`` calls.
Run it with the project's venv:  .venv/bin/python scripts/bench_rpc_cost.py  (see --help).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_support.procs import ProcGroup, cpu_seconds, load_average
from bench_support.service import CHANNEL, start_broker

from channel_client.reply_spin import CALLER_SPIN_S, spin_for_replies

READY = r"^serving (\S+)$"
PUBLISHER_ID = "rpc-cost"
PAYLOAD = "x" * 100


def serve(kind: str, data_dir: str) -> None:
    """The child of the ``plain`` and ``plain+core`` rows: serve until killed."""
    import Pyro5.api

    Pyro5.api.config.SERIALIZER = "msgpack"
    publish = _core_publish(Path(data_dir)) if kind == "plain+core" else None

    class Target:
        @Pyro5.api.expose
        def publish(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
            return publish(batch) if publish else {"accepted": len(batch)}

    daemon = Pyro5.api.Daemon(host="127.0.0.1")
    print(f"serving {daemon.register(Target(), 'target')}", flush=True)
    daemon.requestLoop()


def _core_publish(data_dir: Path) -> Any:
    from channel_server.channel import EventChannel
    from channel_server.config import ChannelConfig
    from channel_server.dispatch import DispatchPool
    from channel_server.store.sqlite import SQLiteStore

    pool = DispatchPool(2)
    pool.start()
    channel = EventChannel(CHANNEL, ChannelConfig(), SQLiteStore(data_dir), pool)
    publishing = channel._publishing  # the path behind the permission checks
    return lambda batch: publishing.publish(publishing.validate(batch))


def events(calls: int) -> list[list[dict[str, Any]]]:
    return [
        [
            {
                "id": f"{PUBLISHER_ID}-{n}",
                "publisher_id": PUBLISHER_ID,
                "partition": n % 16,
                "timestamp": time.time(),
                "payload": PAYLOAD,
            }
        ]
        for n in range(calls)
    ]


def timed(call: Any, batches: list[list[dict[str, Any]]], pid: int) -> dict[str, float]:
    call(batches[0])  # connect and warm up outside the measurement
    cpu_before, start = cpu_seconds(pid), time.perf_counter()
    for batch in batches[1:]:
        call(batch)
    seconds, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu_before
    n = len(batches) - 1
    return {"calls_per_s": n / seconds, "server_cpu_us": cpu / n * 1e6}


def run_plain(procs: ProcGroup, kind: str, calls: int, python: str) -> dict[str, float]:
    import Pyro5.api

    Pyro5.api.config.SERIALIZER = "msgpack"
    data_dir = tempfile.mkdtemp(dir=procs.workdir)
    child = procs.start(kind, [python, __file__, "--serve", kind, "--data-dir", data_dir], READY)
    uri = child.wait_ready().group(1)
    with Pyro5.api.Proxy(uri) as proxy:
        proxy._pyroBind()  # connected: its replies are waited for as Publisher.publish's are
        spin_for_replies(proxy, CALLER_SPIN_S)
        return timed(proxy.publish, events(calls), child.pid)


def run_broker(procs: ProcGroup, calls: int, python: str) -> dict[str, float]:
    from publisher.client import Publisher

    data_dir = tempfile.mkdtemp(dir=procs.workdir)
    broker, ns_port = start_broker(procs, python, ["--data-dir", data_dir], capacity=2 * calls)
    with Publisher(CHANNEL, PUBLISHER_ID, ns_port=ns_port, state_dir=None) as publisher:
        return timed(publisher.publish, events(calls), broker.pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_rpc_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5_000, help="per run (default 5000)")
    parser.add_argument("--runs", type=int, default=3, help="per row (default 3)")
    parser.add_argument("--python", default=sys.executable, help="the children's interpreter")
    parser.add_argument("--serve", choices=("plain", "plain+core"), help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.data_dir)
        return 0
    print(f"1-minute load average at start: {load_average()}", file=sys.stderr)
    rows: dict[str, list[dict[str, float]]] = {"plain": [], "plain+core": [], "broker": []}
    with tempfile.TemporaryDirectory(prefix="bench-rpc-") as tmp:
        for run in range(args.runs):  # the rows alternate within each run (drift)
            for kind in rows:
                with ProcGroup(Path(tmp) / f"{kind}-{run}".replace("+", "-")) as procs:
                    if kind == "broker":
                        rows[kind].append(run_broker(procs, args.calls, args.python))
                    else:
                        rows[kind].append(run_plain(procs, kind, args.calls, args.python))
    print(f"one-event publishes, {args.calls:,} calls, median of {args.runs} runs\n")
    print("| server | calls/s | server CPU µs per call |")
    print("|---|---|---|")
    for kind, runs in rows.items():
        rate = statistics.median(r["calls_per_s"] for r in runs)
        cpu = statistics.median(r["server_cpu_us"] for r in runs)
        print(f"| {kind} | {rate:,.0f} | {cpu:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
