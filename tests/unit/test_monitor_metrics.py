"""The Prometheus collector and the JSON views, from fake ``stats()`` dicts (no sockets)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from channel_server.monitor.metrics import registry_for
from channel_server.monitor.views import channel_row, channel_status
from tests.unit.monitor_fakes import group, member, stats


def scrape(*channels: dict) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, as Prometheus would read the exposition."""
    text = generate_latest(registry_for("b1", lambda: list(channels))).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_channel_counters_and_gauges_carry_the_stats() -> None:
    values = scrape(stats("orders", accepted=12, acked=7), stats("audit", accepted=3, acked=3))
    orders = (("channel", "orders"),)
    assert values["pubsub_channel_accepted_events_total", orders] == 12
    assert values["pubsub_channel_acked_events_total", orders] == 7
    assert values["pubsub_channel_unacked_events", orders] == 5
    assert values["pubsub_channel_stored_events", orders] == 5
    assert values["pubsub_channel_dead_letters", orders] == 1
    assert values["pubsub_channel_cold_events_total", orders] == 4
    assert values["pubsub_channel_read_back_events_total", orders] == 3
    assert values["pubsub_channel_broker_cpu_share", orders] == 0.83
    assert values["pubsub_channel_machine_cpu_share", orders] == 0.79
    assert values["pubsub_channel_busy", orders] == 1
    assert values["pubsub_channel_accepted_events_total", (("channel", "audit"),)] == 3
    assert values["pubsub_broker_channels", ()] == 2
    assert values["pubsub_broker_info", (("broker", "b1"),)] == 1
    assert values["pubsub_broker_threads", ()] >= 1
    assert values["process_resident_memory_bytes", ()] > 0


def test_group_gauges_count_members_by_state_and_sum_partitions() -> None:
    values = scrape(stats("orders"))
    group = (("channel", "orders"), ("group", "default"))
    assert values["pubsub_group_backlog_events", group] == 5
    assert values["pubsub_group_in_flight_events", group] == 4  # 3 + 1 over two partitions
    assert values["pubsub_group_partitions", group] == 2
    assert values["pubsub_group_members", (*group, ("state", "active"))] == 1
    assert values["pubsub_group_members", (*group, ("state", "inactive"))] == 1


def test_member_figures_are_labelled_by_channel_group_and_member() -> None:
    values = scrape(stats("orders"))
    s1 = (("channel", "orders"), ("group", "default"), ("member", "s1"))
    s2 = (("channel", "orders"), ("group", "default"), ("member", "s2"))
    assert values["pubsub_member_active", s1] == 1
    assert values["pubsub_member_active", s2] == 0
    assert values["pubsub_member_partitions", s1] == 2
    assert values["pubsub_member_queued_events", s1] == 3
    assert values["pubsub_member_in_flight_events", s1] == 4
    assert values["pubsub_member_delivered_events_total", s1] == 40
    assert values["pubsub_member_acked_events_total", s1] == 36
    assert values["pubsub_member_batches_total", s1] == 5
    assert values["pubsub_member_ack_messages_total", s1] == 4
    assert values["pubsub_member_failures_total", s1] == 1
    assert values["pubsub_member_small_delays_total", s1] == 2
    assert values["pubsub_member_long_delays_total", s1] == 0
    assert values["pubsub_member_last_seen_age_seconds", s1] == 0.5
    assert values["pubsub_member_oldest_in_flight_seconds", s1] == 2.5


def test_labels_never_hold_event_ids_and_text_is_escaped() -> None:
    # Given a member id with quotes and a backslash (ids are checked names, but a label
    # must survive anything)
    odd = stats(
        "orders",
        default=group(0, [member('a"b\\c')], []),
    )
    # When scraped, Then the exposition parses back to the same id
    values = scrape(odd)
    labels = (("channel", "orders"), ("group", "default"), ("member", 'a"b\\c'))
    assert values["pubsub_member_partitions", labels] == 2
    label_names = {name for key in values for name, _ in key[1]}
    assert label_names <= {"channel", "group", "member", "state", "broker", "le"}


def test_no_channels_still_gives_the_broker_figures() -> None:
    values = scrape()
    assert values["pubsub_broker_channels", ()] == 0
    assert not any(name.startswith("pubsub_channel") for name, _ in values)


def test_list_row_and_status_entry_are_built_from_stats() -> None:
    row = channel_row("orders", "b1", stats("orders"))
    assert row == {
        "channel": "orders",
        "broker": "b1",
        "reachable": True,
        "groups": 1,
        "members": 2,
        "backlog": 5,
        "kind": "queue",
        "active_members": 1,
        "accepted": 12,
        "acked": 7,
        "dead_letters": 1,
        "rates": {"interval_s": 10.0, "accepted_per_s": 1.2, "acked_per_s": 0.7},
    }
    gone = channel_row("orders", "b1", None)
    assert gone["reachable"] is False and gone["backlog"] == "?"
    assert channel_status("b1", stats("orders")) == dict(stats("orders"), broker="b1")


def test_group_counters_histograms_and_restore_time_are_exposed() -> None:
    values = scrape(stats("orders"))
    orders = (("channel", "orders"),)
    group = (*orders, ("group", "default"))
    assert values["pubsub_group_nacked_events_total", group] == 2
    assert values["pubsub_group_redelivered_events_total", group] == 3
    assert values["pubsub_group_dead_lettered_events_total", group] == 1
    assert values["pubsub_group_suspect_events", group] == 2
    assert values["pubsub_group_ack_latency_seconds_bucket", (*group, ("le", "0.01"))] == 5
    assert values["pubsub_group_ack_latency_seconds_bucket", (*group, ("le", "+Inf"))] == 6
    assert values["pubsub_group_ack_latency_seconds_count", group] == 6
    assert values["pubsub_group_ack_latency_seconds_sum", group] == 0.5
    assert values["pubsub_channel_store_write_seconds_count", orders] == 4
    assert values["pubsub_channel_restore_seconds", orders] == 0.25
    s1 = (*group, ("member", "s1"))
    assert values["pubsub_member_offloads_total", s1] == 1


def test_group_gauges_count_partitions_the_stats_do_not_list() -> None:
    """A group of 100,000 partitions lists only its busiest: the gauges take its totals."""
    channel = stats("orders")
    channel["groups"]["default"] |= {"partitions_total": 100_000, "in_flight": 250}
    values = scrape(channel)
    group = (("channel", "orders"), ("group", "default"))
    assert values["pubsub_group_partitions", group] == 100_000
    assert values["pubsub_group_in_flight_events", group] == 250
