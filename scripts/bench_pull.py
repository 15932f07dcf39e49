#!/usr/bin/env python
"""Benchmark the classic pull API's ``get`` round trips (issue 5), with real processes on
127.0.0.1.

Every run starts a broker (embedded name server on a free port), creates a topic,
subscribes one pull subscriber to it (a group of its own), publishes the messages it will
get (``publisher.client.Publisher``, batches of 1,000) and then gets them one by one, each
``get`` acknowledging the one before (exactly-once get). Measurements (pick with
``--only``; each is repeated ``--runs`` times, fresh processes every run):

  library  ``subscriber.pull.PullClient.get`` in this process: one persistent proxy; the
           client's state file (last id per topic) is read and saved, with fsync, on every
           get, as the library does. Figure: gets/s over N gets (after 20 warm-up gets)
  raw      the same gets as bare proxy calls, ``channel.get(subscriber_id, last_uid)``:
           the RPC and the broker's work only (no state file)
  cli      ``python -m subscriber get TOPIC --id S``: a process per get (interpreter
           start, imports, name-server lookup, connect, get, state file). Figure: gets/s
           over a few dozen calls, and the time to import the CLI alone

Run it with the project's venv:  .venv/bin/python scripts/bench_pull.py  (see --help).
Every child process is stopped at the end, also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_support.procs import HOST, ROOT, BenchError, ProcGroup, child_env, load_average
from bench_support.report import Target, add_store_flag, bench_main, make_parser, positive
from bench_support.service import (
    EventMaker,
    channel_proxy,
    fresh_store_args,
    publish_count,
    start_broker,
)

sys.path.insert(0, str(ROOT))  # measure the checkout this script is in, whatever is installed
MEASUREMENTS = ("library", "raw", "cli")
TOPIC = "pullbench"
SUBSCRIBER = "puller"
PUBLISHER = "bench"
WARMUP_GETS = 20
CLI_TIMEOUT_S = 60.0


@dataclass
class PullSettings:
    python: str
    runs: int
    store: str
    log_level: str
    gets: int
    cli_calls: int
    payload_size: int
    workdir: Path = field(default_factory=Path)


def prepared_topic(procs: ProcGroup, ps: PullSettings, messages: int) -> int:
    """A broker, the topic with SUBSCRIBER subscribed (pull), ``messages`` published on
    it. Returns the name server's port."""
    from channel_client.lookup import resolve_channel
    from publisher.client import Publisher

    _, ns_port = start_broker(
        procs, ps.python, fresh_store_args(procs, ps.store), capacity=1_000_000,
        log_level=ps.log_level,
    )  # fmt: skip
    resolve_channel(HOST, ns_port, TOPIC, create=True, kind="topic")
    with channel_proxy(ns_port, TOPIC) as channel:
        info = channel.subscribe(SUBSCRIBER)
    if info["mode"] != "pull":
        raise BenchError(f"subscribed in {info['mode']} mode, not pull")
    with Publisher(
        TOPIC, PUBLISHER, ns_port=ns_port, state_dir=None, create=True, kind="topic"
    ) as publisher:
        publish_count(publisher, EventMaker(PUBLISHER, 1, ps.payload_size), messages, 1_000)
    return ns_port


def expect(reply: dict[str, Any], seq: int) -> str:
    """The id of a get's message, which must be message ``seq`` of the topic."""
    want = f"{PUBLISHER}-{seq}"
    if reply.get("status") != "message" or reply["event"]["id"] != want:
        raise BenchError(f"get {seq}: expected {want}, got {reply}")
    return want


def timed_gets(get: Callable[[], dict[str, Any]], gets: int) -> float:
    """Warm up, then time ``gets`` calls of ``get``; returns the seconds they took."""
    for seq in range(1, WARMUP_GETS + 1):
        expect(get(), seq)
    t0 = time.perf_counter()
    for seq in range(WARMUP_GETS + 1, WARMUP_GETS + gets + 1):
        expect(get(), seq)
    return time.perf_counter() - t0


def gets_result(gets: int, elapsed: float, load: float) -> dict[str, Any]:
    return {
        "gets": gets,
        "seconds": round(elapsed, 4),
        "gets_per_s": round(gets / elapsed, 1),
        "ms_per_get": round(1000 * elapsed / gets, 3),
        "load1": load,
    }


def measure_library(ps: PullSettings, run: int) -> dict[str, Any]:
    from channel_client.remote import ClientOptions
    from subscriber.pull import PullClient

    load = load_average()
    with ProcGroup(ps.workdir / f"library-{run}") as procs:
        ns_port = prepared_topic(procs, ps, WARMUP_GETS + ps.gets)
        state_dir = procs.workdir / "state"
        client = PullClient(
            SUBSCRIBER, state_dir, ClientOptions(HOST, ns_port, attempts=1, timeout_s=10.0)
        )
        try:
            elapsed = timed_gets(lambda: client.get(TOPIC), ps.gets)
        finally:
            client.close()
    return gets_result(ps.gets, elapsed, load)


def measure_raw(ps: PullSettings, run: int) -> dict[str, Any]:
    from channel_server.events import event_uid

    load = load_average()
    with ProcGroup(ps.workdir / f"raw-{run}") as procs:
        ns_port = prepared_topic(procs, ps, WARMUP_GETS + ps.gets)
        last: list[str | None] = [None]

        with channel_proxy(ns_port, TOPIC) as channel:

            def get() -> dict[str, Any]:
                reply = channel.get(SUBSCRIBER, last[0])
                if reply.get("status") == "message":
                    last[0] = event_uid(reply["event"]["publisher_id"], reply["event"]["id"])
                return reply

            elapsed = timed_gets(get, ps.gets)
    return gets_result(ps.gets, elapsed, load)


def run_cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """One short-lived child; subprocess.run kills it on any exception (Ctrl-C too)."""
    return subprocess.run(
        argv,
        cwd=ROOT,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def measure_cli(ps: PullSettings, run: int) -> dict[str, Any]:
    load = load_average()
    with ProcGroup(ps.workdir / f"cli-{run}") as procs:
        ns_port = prepared_topic(procs, ps, ps.cli_calls)
        argv = [
            ps.python, "-m", "subscriber", "get", TOPIC,
            "--id", SUBSCRIBER,
            "--ns-port", str(ns_port),
            "--state-dir", str(procs.workdir / "state"),
            "--attempts", "1",
        ]  # fmt: skip
        per_call = []
        for seq in range(1, ps.cli_calls + 1):
            t0 = time.perf_counter()
            done = run_cli(argv)
            per_call.append(time.perf_counter() - t0)
            if done.returncode != 0 or not done.stdout.startswith(f"{PUBLISHER}-{seq}:"):
                raise BenchError(f"get {seq}: exit {done.returncode}: {done.stdout}{done.stderr}")
        imports = []
        for _ in range(3):  # the interpreter and the CLI's imports, nothing else
            t0 = time.perf_counter()
            run_cli([ps.python, "-c", "import subscriber.cli"]).check_returncode()
            imports.append(time.perf_counter() - t0)
    total = sum(per_call)
    return {
        "gets": ps.cli_calls,
        "seconds": round(total, 3),
        "gets_per_s": round(ps.cli_calls / total, 2),
        "ms_per_get": round(1000 * statistics.median(per_call), 1),
        "max_ms_per_get": round(1000 * max(per_call), 1),
        "import_ms": round(1000 * statistics.median(imports), 1),
        "load1": load,
    }


SHOWN: dict[str, list[tuple[str, str, str]]] = {
    "library": [
        ("gets_per_s", "gets/s, one client (PullClient, persistent proxy)", ",.0f"),
        ("ms_per_get", "ms per get (mean)", ".3f"),
    ],
    "raw": [
        ("gets_per_s", "gets/s, bare proxy calls", ",.0f"),
        ("ms_per_get", "ms per get (mean)", ".3f"),
    ],
    "cli": [
        ("gets_per_s", "gets/s, a process per get", ",.2f"),
        ("ms_per_get", "ms per get (median)", ",.0f"),
        ("max_ms_per_get", "ms per get (max)", ",.0f"),
        ("import_ms", "ms to start python and import subscriber.cli", ",.0f"),
    ],
}
TARGETS = {("library", "gets_per_s"): Target("gets_per_s", ">=", 2_000)}
MEASURE: dict[str, Callable[[PullSettings, int], dict[str, Any]]] = {
    "library": measure_library,
    "raw": measure_raw,
    "cli": measure_cli,
}


def describe(name: str, ps: PullSettings) -> str:
    if name == "cli":
        return f"{ps.cli_calls} x python -m subscriber get, {ps.payload_size} B messages"
    how = "PullClient.get" if name == "library" else "proxy.get(subscriber_id, last_uid)"
    return f"{ps.gets:,} gets of {ps.payload_size} B messages, {how}, {ps.store} store"


# -- command line ------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "scripts/bench_pull.py",
        __doc__,
        "Target (issue 5): ≥ 2,000 gets/s for one client.",
        MEASUREMENTS,
    )
    add_store_flag(parser)
    parser.add_argument(
        "--gets", type=positive, default=3_000, help="timed gets, library and raw (default 3000)"
    )
    parser.add_argument("--cli-calls", type=positive, default=30, help="CLI processes (default 30)")
    parser.add_argument("--payload-size", type=int, default=100, help="bytes (default 100)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return bench_main(
        args,
        prog="bench_pull",
        build=lambda workdir: PullSettings(
            python=args.python,
            runs=args.runs,
            store=args.store,
            log_level=args.log_level,
            gets=args.gets,
            cli_calls=args.cli_calls,
            payload_size=args.payload_size,
            workdir=workdir,
        ),
        measure=MEASURE,
        describe=describe,
        shown=SHOWN,
        targets=TARGETS,
        title=f"Pull get benchmark: {args.store} store, {args.runs} run(s) each, median first",
    )


if __name__ == "__main__":
    sys.exit(main())
