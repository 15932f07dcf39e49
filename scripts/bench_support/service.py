"""The service's pieces as the bench scripts drive them: broker and bench-subscriber
processes, a proxy to the channel, synthetic events, publishing and waiting for acks."""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from bench_support.procs import HOST, BenchError, Proc, ProcGroup, free_port

SUPPORT = Path(__file__).resolve().parent
CHANNEL = "bench"
WARMUP_PUBLISHER = "warmup"
ACK_POLL_S = 0.01
BROKER_READY = r"broker \S+ ready at"
WARMUP_BATCH = 1_000
"""Warm-up events per publish: at 100,000 partitions the warm-up has 400,000 events, more
than one publish may carry."""


def start_broker(
    procs: ProcGroup,
    python: str,
    store_args: Sequence[str],
    *,
    capacity: int,
    log_level: str = "WARNING",
    extra_args: Sequence[str] = (),
    ns_port: int | None = None,
    name: str = "broker",
    channel: str = CHANNEL,
    wait: bool = True,
) -> tuple[Proc, int]:
    """``python -m channel_server serve`` hosting ``channel``, with an embedded name server
    on ``ns_port`` (a free one by default). Waits for its ready line unless ``wait`` is
    false. ``store_args`` is ``["--memory"]`` or ``["--data-dir", DIR]``; the process name
    must start with "broker" (the group stops brokers last)."""
    ns_port = ns_port or free_port()
    argv = [
        python, "-m", "channel_server", "serve",
        "--ns-port", str(ns_port),
        "--channel", channel,
        "--capacity", str(capacity),
        "--log-level", log_level,
        *store_args,
        *extra_args,
    ]  # fmt: skip
    broker = procs.start(name, argv, BROKER_READY)
    if wait:
        broker.wait_ready()
    return broker, ns_port


class RunSettings(Protocol):
    """What ``start_run_broker`` needs of a script's settings."""

    python: str
    store: str
    """sqlite or memory"""
    log_level: str

    @property
    def broker_args(self) -> Sequence[str]: ...


def start_run_broker(procs: ProcGroup, s: RunSettings, capacity: int) -> tuple[Proc, int]:
    """A broker with an embedded name server on a free port, hosting the bench channel.

    Its store is fresh every run: SQLite (the service's default) in the run's directory,
    deleted when the run's processes stop, or ``--memory``."""
    return start_broker(
        procs,
        s.python,
        fresh_store_args(procs, s.store),
        capacity=capacity,
        log_level=s.log_level,
        extra_args=s.broker_args,
    )


def fresh_store_args(procs: ProcGroup, store: str) -> list[str]:
    """Broker flags for a fresh store: ``--memory``, or SQLite (the service's default) in
    the run's directory, deleted when the run's processes stop."""
    if store == "memory":
        return ["--memory"]
    if store.startswith("postgresql://"):  # a database made for the run (bench_pg.py)
        return ["--store", store]
    data_dir = procs.workdir / "data"
    procs.scratch.append(data_dir)
    return ["--data-dir", str(data_dir)]


BROKER_CPU = 0
BROKER_CPU_ARGS = ("--cpu", str(BROKER_CPU))
"""The broker's flags when each side has CPUs of its own (``--separate-cpus``)."""


def subscriber_cpus() -> list[str]:
    """The command prefix that runs a bench subscriber on every CPU this process may use
    but the broker's (``--separate-cpus``). BenchError on a machine with no other."""
    allowed = os.sched_getaffinity(0)
    others = sorted(allowed - {BROKER_CPU})
    if BROKER_CPU not in allowed or not others:
        raise BenchError(f"--separate-cpus needs CPU {BROKER_CPU} and another one")
    if shutil.which("taskset") is None:
        raise BenchError("--separate-cpus needs taskset (util-linux)")
    return ["taskset", "-c", ",".join(map(str, others))]


def bench_subscriber_argv(
    python: str,
    ns_port: int,
    sub_id: str,
    out: Path,
    prefetch: int | None = None,
    extra_args: Sequence[str] = (),
    channel: str = CHANNEL,
) -> list[str]:
    """The command line of one ``bench_support/sub.py`` process."""
    argv = [
        python, str(SUPPORT / "sub.py"),
        "--ns-port", str(ns_port),
        "--channel", channel,
        "--id", sub_id,
        "--out", str(out),
        "--skip-publisher", WARMUP_PUBLISHER,
    ]  # fmt: skip
    if prefetch is not None:
        argv += ["--prefetch", str(prefetch)]
    return argv + list(extra_args)


def start_bench_subscribers(
    procs: ProcGroup,
    python: str,
    ns_port: int,
    ids: Sequence[str],
    prefetch: int | None = None,
    extra_args: Sequence[str] = (),
    channel: str = CHANNEL,
    prefix: Sequence[str] = (),
) -> list[tuple[Proc, Path]]:
    """Bench subscribers of ``channel`` (started in parallel, then waited for); each
    writes its JSON summary to ``<workdir>/<id>.json`` when stopped. ``prefix`` goes
    before each command line (:func:`subscriber_cpus`)."""
    subs = []
    for sub_id in ids:
        out = procs.workdir / f"{sub_id}.json"
        argv = bench_subscriber_argv(python, ns_port, sub_id, out, prefetch, extra_args, channel)
        argv = [*prefix, *argv]
        subs.append((procs.start(sub_id, argv, rf"bench-sub {sub_id} ready"), out))
    for proc, _ in subs:
        proc.wait_ready()
    return subs


def read_summaries(subs: Sequence[tuple[Proc, Path]]) -> list[dict[str, Any]]:
    """The JSON summaries of stopped bench subscribers."""
    summaries = []
    for proc, out in subs:
        if not out.exists():
            raise BenchError(f"{proc.name} wrote no summary:\n{proc.tail()}")
        summaries.append(json.loads(out.read_text()))
    return summaries


def channel_proxy(ns_port: int, channel: str = CHANNEL, timeout_s: float = 10.0) -> Any:
    """A Pyro5 proxy to the channel's RPC object, found through the name server (see
    :class:`ReopenedProxy`)."""
    from channel_client.lookup import resolve_channel
    from channel_server.wire import make_proxy

    uri = resolve_channel(HOST, ns_port, channel)
    return ReopenedProxy(lambda: make_proxy(uri, timeout_s))


class ReopenedProxy:
    """A proxy for the bench's own calls (stats, ...) made anew when the broker closed the
    last one's connection as idle (``serve --comm-timeout``, 60 s by default): a long run
    publishes for longer than that between two of them. (A new proxy, not a reconnected
    one: each connection proves the token afresh.)"""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._proxy = make()

    def __getattr__(self, name: str) -> Any:
        from channel_server.wire import closed_by_peer

        if closed_by_peer(self._proxy):
            self._proxy._pyroRelease()
            self._proxy = self._make()
        return getattr(self._proxy, name)

    def __enter__(self) -> ReopenedProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self._proxy._pyroRelease()


class EventMaker:
    """Event dicts as the publisher library makes them, stamped when the batch is built;
    their ids are ``<id_prefix>-<n>`` (the publisher id by default)."""

    def __init__(
        self, publisher_id: str, partitions: int, payload_size: int, id_prefix: str = ""
    ) -> None:
        self.publisher_id = publisher_id
        self.id_prefix = id_prefix or publisher_id
        self.partitions = partitions
        self.payload = "x" * payload_size
        self.seq = 0

    def batch(self, size: int) -> list[dict[str, Any]]:
        now = time.time()
        events = []
        for _ in range(size):
            self.seq += 1
            events.append(
                {
                    "id": f"{self.id_prefix}-{self.seq}",
                    "publisher_id": self.publisher_id,
                    "partition": self.seq % self.partitions,
                    "timestamp": now,
                    "payload": self.payload,
                }
            )
        return events


def publish_checked(publisher: Any, batch: list[dict[str, Any]]) -> None:
    summary = publisher.publish(batch)
    if summary["accepted"] != len(batch):
        raise BenchError(f"publish accepted {summary['accepted']} of {len(batch)}: {summary}")


SUBMITTED_WAIT_S = 600.0
"""How long a run waits for its submissions to be stored."""


def publish_count(
    publisher: Any,
    maker: EventMaker,
    count: int,
    batch_size: int,
    tick_s: float | None = None,
    stop: threading.Event | None = None,
    submit: bool = False,
) -> int:
    """Publish ``count`` events in batches (paced at one batch every ``tick_s`` when
    given), until done or ``stop`` is set; returns how many were published. With
    ``submit``, each batch goes to ``Publisher.submit`` and every one is waited for at
    the end."""
    batches = math.ceil(count / batch_size)
    published = 0
    futures = []
    next_tick = time.perf_counter()
    for i in range(batches):
        if stop is not None and stop.is_set():
            break
        if tick_s is not None:
            delay = next_tick - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            next_tick += tick_s
        size = min(batch_size, count - i * batch_size)
        if submit:
            futures.append(publisher.submit(maker.batch(size)))
        else:
            publish_checked(publisher, maker.batch(size))
        published += size
    if submit:
        publisher.flush(SUBMITTED_WAIT_S)
        accepted = sum(future.result(timeout=0)["accepted"] for future in futures)
        if accepted != published:
            raise BenchError(f"submit accepted {accepted} of {published}")
    return published


def warm_up(
    publisher: Any,
    channel: Any,
    partitions: int,
    payload_size: int,
    size: int,
    publisher_id: str = WARMUP_PUBLISHER,
) -> int:
    """Publish a batch of ``size`` warm-up events (ids ``warmup-<n>``, which bench
    subscribers leave out of their figures) and wait for their acks, so connections exist
    before measuring. Returns ``size``: the acked count the measurement starts from.

    A partition is per (publisher, partition): under the warm-up's own publisher id (the
    default) the run opens partitions of its own; under the run's, they are open already."""
    warm = EventMaker(publisher_id, partitions, payload_size, id_prefix=WARMUP_PUBLISHER)
    publish_count(publisher, warm, size, WARMUP_BATCH)  # a batch stays a normal one
    wait_acked(channel, warm.seq, max(30.0, size / 1_000))
    return warm.seq


def batch_counts(channel: Any) -> tuple[int, int, int]:
    """Events delivered, batches (pushes) and ack messages, summed over every member of
    every group: each push costs an RPC and an ack whatever its size."""
    members = [m for g in channel.stats()["groups"].values() for m in g["members"]]
    return (
        sum(m["delivered"] for m in members),
        sum(m["batches"] for m in members),
        sum(m["ack_messages"] for m in members),
    )


def per_batch(before: tuple[int, int, int], after: tuple[int, int, int]) -> dict[str, Any]:
    """Events per push and ack messages per push over a run (None: no push)."""
    delivered, batches, acks = (b - a for a, b in zip(before, after, strict=True))
    return {
        "events_per_push": round(delivered / batches, 1) if batches else None,
        "acks_per_push": round(acks / batches, 2) if batches else None,
    }


def wait_acked(channel: Any, target: int, timeout_s: float) -> float:
    """Poll the channel until ``acked >= target``; returns the time.time() it was seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = channel.stats()
        if stats["acked"] >= target:
            return time.time()
        if time.monotonic() > deadline:
            raise BenchError(
                f"only {stats['acked']} of {target} events acked after {timeout_s:g} s "
                f"(accepted {stats['accepted']}, unacked {stats['unacked']})"
            )
        time.sleep(ACK_POLL_S)


def use_tls(directory: Path) -> None:
    """Turn TLS on for this process and its children (mutual, a test CA made with trustme
    in ``directory``): what the service costs with it."""
    import os

    import trustme

    from channel_server import tls

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = {name: directory / name for name in ("ca.pem", "cert.pem", "key.pem")}
    ca.cert_pem.write_to_path(str(paths["ca.pem"]))
    cert.cert_chain_pems[0].write_to_path(str(paths["cert.pem"]))
    cert.private_key_pem.write_to_path(str(paths["key.pem"]))
    paths["key.pem"].chmod(0o600)
    os.environ[tls.CERT_ENV] = str(paths["cert.pem"])
    os.environ[tls.KEY_ENV] = str(paths["key.pem"])
    os.environ[tls.CA_ENV] = str(paths["ca.pem"])
    tls.from_environment()
