"""Prometheus metrics of a broker, read from its channels' ``stats()`` at scrape time.

Nothing is counted in the hot paths for Prometheus: the channel already keeps its totals
(accepted, acknowledged, per-member deliveries, failures, delays) and a scrape reads them
through the same ``stats()`` that ``status`` uses, one channel lock at a time. Labels are
bounded: channel, group and member ids (capped by ``max_channels`` and ``max_members``),
never an event id. Units are in the names (``_events``, ``_bytes``, ``_seconds``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

PREFIX = "pubsub_"
CHANNEL, GROUP, MEMBER = ["channel"], ["channel", "group"], ["channel", "group", "member"]

# (name without prefix, kind, help, stats key) of each per-channel figure
CHANNEL_METRICS = (
    ("channel_published_events", "counter", "Events published (before dedupe).", "published"),
    ("channel_duplicate_events", "counter", "Events published again (dedupe).", "duplicates"),
    ("channel_refused_events", "counter", "Events refused for room (QueueFull).", "refused"),
    ("channel_unrouted_events", "counter", "Events published with no group.", "unrouted"),
    ("channel_accepted_events", "counter", "Events accepted (stored, not duplicates).", "accepted"),
    ("channel_acked_events", "counter", "Events acknowledged by every group.", "acked"),
    ("channel_cold_events", "counter", "Events queued without their payload.", "queued_cold"),
    ("channel_read_back_events", "counter", "Payloads read back from the store.", "read_back"),
    ("channel_unacked_events", "gauge", "Events accepted and not yet acknowledged.", "unacked"),
    ("channel_capacity_events", "gauge", "Most unacknowledged events held.", "capacity"),
    ("channel_queued_bytes", "gauge", "Bytes of unacknowledged events.", "queued_bytes"),
    ("channel_max_queued_bytes", "gauge", "Most bytes unacked held.", "max_queued_bytes"),
    (
        "channel_partition_queues",
        "gauge",
        "Partition sub-queues held over every group.",
        "partition_queues",
    ),
    (
        "channel_max_partition_queues",
        "gauge",
        "Most partition sub-queues held.",
        "max_partition_queues",
    ),
    ("channel_dead_letters", "gauge", "Events in the dead-letter queue now.", "dead_letters"),
    ("channel_stored_events", "gauge", "Events in the store (backup queue).", "stored"),
    ("channel_restore_seconds", "gauge", "Seconds the channel's last restore took.", "restore_s"),
    (
        "channel_broker_cpu_share",
        "gauge",
        "Cores the broker used (last window).",
        "broker_cpu_share",
    ),
    (
        "channel_machine_cpu_share",
        "gauge",
        "Machine CPUs in use (last window).",
        "machine_cpu_share",
    ),
    ("channel_busy", "gauge", "1 while short pushes wait to fill.", "busy"),
)
GROUP_METRICS = (
    ("group_nacked_events", "counter", "Handler failures subscribers reported.", "nacked"),
    ("group_redelivered_events", "counter", "Deliveries at attempt 2 or later.", "redelivered"),
    ("group_dead_lettered_events", "counter", "Events given up on.", "dead_lettered"),
    (
        "group_suspect_events",
        "gauge",
        "Events a subscriber died holding: they go out alone (--max-crashes).",
        "suspects",
    ),
)
MEMBER_METRICS = (
    ("member_active", "gauge", "1 if the member is active, 0 if declared dead.", "active"),
    ("member_partitions", "gauge", "Partitions the member owns.", "partitions"),
    ("member_queued_events", "gauge", "Events queued for the member.", "queued"),
    ("member_in_flight_events", "gauge", "Events delivered, not yet acknowledged.", "in_flight"),
    ("member_window_events", "gauge", "Events the member may hold now.", "window"),
    ("member_delivered_events", "counter", "Events delivered to the member.", "delivered"),
    ("member_batches", "counter", "Batches delivered to the member (pushes or gets).", "batches"),
    ("member_acked_events", "counter", "Events the member acknowledged.", "acked"),
    ("member_ack_messages", "counter", "Ack messages from the member.", "ack_messages"),
    ("member_failures", "counter", "Failed pushes and handler failures.", "failures"),
    ("member_small_delays", "counter", "Pushes slower than --small-delay.", "small_delays"),
    ("member_long_delays", "counter", "Pushes slower than --long-delay.", "long_delays"),
    ("member_offloads", "counter", "Times its partitions moved away for slowness.", "offloads"),
    ("member_last_seen_age_seconds", "gauge", "Seconds since its last sign of life.", "seen_s_ago"),
    (
        "member_oldest_in_flight_seconds",
        "gauge",
        "Seconds the member has held its oldest unacknowledged event (0: none).",
        "oldest_in_flight_s",
    ),
)
Family = CounterMetricFamily | GaugeMetricFamily
"""A metric family that takes samples (``add_metric``)."""
_FAMILIES: dict[str, type[Family]] = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}


def _family(name: str, kind: str, doc: str, labels: list[str]) -> Family:
    return _FAMILIES[kind](PREFIX + name, doc, labels=labels)


def channel_families(snapshot: Iterable[dict[str, Any]]) -> list[Metric]:
    """The metric families of these channels' ``stats()`` dicts (pure)."""
    per_channel = [(key, _family(n, k, d, CHANNEL)) for n, k, d, key in CHANNEL_METRICS]
    per_member = [(key, _family(n, k, d, MEMBER)) for n, k, d, key in MEMBER_METRICS]
    per_group = [(key, _family(n, k, d, GROUP)) for n, k, d, key in GROUP_METRICS]
    ack_latency = HistogramMetricFamily(
        PREFIX + "group_ack_latency_seconds",
        "Seconds from acceptance to the group's ack (events accepted since the start).",
        labels=GROUP,
    )
    store_write = HistogramMetricFamily(
        PREFIX + "channel_store_write_seconds",
        "Seconds of each publish's store write.",
        labels=CHANNEL,
    )
    backlog = _family("group_backlog_events", "gauge", "Events the group has yet to ack.", GROUP)
    in_flight = _family("group_in_flight_events", "gauge", "Events delivered, unacked.", GROUP)
    partitions = _family("group_partitions", "gauge", "Partitions the group holds.", GROUP)
    members = _family(
        "group_members", "gauge", "Members by state (active or inactive).", [*GROUP, "state"]
    )
    for stats in snapshot:
        channel = stats["name"]
        for key, family in per_channel:
            if key in stats:
                family.add_metric([channel], float(stats[key]))
        if "store_write_s" in stats:
            _add_histogram(store_write, [channel], stats["store_write_s"])
        for group_name, group in stats["groups"].items():
            labels = [channel, group_name]
            backlog.add_metric(labels, group["backlog"])
            for key, family in per_group:
                family.add_metric(labels, float(group[key]))
            _add_histogram(ack_latency, labels, group["ack_latency_s"])
            in_flight.add_metric(labels, group["in_flight"])
            partitions.add_metric(labels, group["partitions_total"])
            active = sum(1 for m in group["members"] if m["active"])
            members.add_metric([*labels, "active"], active)
            members.add_metric([*labels, "inactive"], len(group["members"]) - active)
            for member in group["members"]:
                for key, family in per_member:
                    family.add_metric([*labels, member["id"]], float(member[key]))
    families: list[Metric] = [f for _, f in per_channel]
    families += [store_write, backlog, in_flight, partitions, members]
    families += [f for _, f in per_group]
    return [*families, ack_latency, *(f for _, f in per_member)]


def _add_histogram(family: HistogramMetricFamily, labels: list[str], hist: dict[str, Any]) -> None:
    """One histogram of ``stats()`` (cumulative ``[le, count]`` pairs, sum, count)."""
    buckets = [(str(le), float(n)) for le, n in hist["buckets"]]
    family.add_metric(labels, buckets, sum_value=hist["sum"])


class ChannelsCollector(Collector):
    """Reads the channels' stats when Prometheus scrapes (``snapshot`` gives them), and
    the broker's own figures: its id, channel count and threads."""

    def __init__(self, broker_id: str, snapshot: Callable[[], list[dict[str, Any]]]) -> None:
        self._broker_id = broker_id
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        stats = self._snapshot()
        info = GaugeMetricFamily(PREFIX + "broker_info", "The broker (1).", labels=["broker"])
        info.add_metric([self._broker_id], 1)
        yield info
        yield GaugeMetricFamily(
            PREFIX + "broker_channels", "Channels this caller may see.", value=len(stats)
        )
        yield GaugeMetricFamily(
            PREFIX + "broker_threads", "Threads of the broker process.", threading.active_count()
        )
        yield from channel_families(stats)

    def describe(self) -> list[Metric]:
        return []  # values come at scrape time only; nothing to check at registration


def registry_for(broker_id: str, snapshot: Callable[[], list[dict[str, Any]]]) -> CollectorRegistry:
    """A registry of one scrape: the channels ``snapshot`` returns (those the caller may
    see) and the process (RSS, CPU, open files) from prometheus_client."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ChannelsCollector(broker_id, snapshot))
    ProcessCollector(registry=registry)
    return registry
