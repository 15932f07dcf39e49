"""The plan in plain Python: LPT assignment, tie-breaks, skew and the plan.json shape."""

from __future__ import annotations

import json

import pytest

from spark_partitions.output import plan_json_text, write_plan_local
from spark_partitions.plan import (
    Block,
    GroupStats,
    assign_slots,
    build_plan,
    lpt_order,
    resolve_partitions,
    skew,
)


def block(publisher: str, partition, count: int) -> Block:
    return Block(publisher, partition, count, 1.0, 2.0, -1)


def group(publisher: str, text: str, count: int, all_int: bool = True) -> GroupStats:
    return GroupStats(publisher, text, all_int, count, 1.0, float(count))


def test_lpt_puts_the_largest_block_first_on_the_least_loaded_slot():
    blocks = [block("p", n, size) for n, size in enumerate([5, 4, 3, 3, 2, 2, 1])]
    assigned = assign_slots(blocks, 3)
    assert [b.count for b in assigned] == [5, 4, 3, 3, 2, 2, 1]
    # slots: 0:5 1:4 2:3 -> 2:+3=6 -> 1:+2=6 -> 0:+2=7 -> 1:+1=7
    assert [b.slot for b in assigned] == [0, 1, 2, 2, 1, 0, 1]


def test_equal_counts_are_ordered_by_publisher_then_partition_text():
    blocks = [block("b", 1, 2), block("a", 10, 2), block("a", 9, 2), block("a", "x", 3)]
    ordered = lpt_order(blocks)
    # partition compared as text: "10" < "9"
    assert [(b.publisher_id, b.partition) for b in ordered] == [
        ("a", "x"),
        ("a", 10),
        ("a", 9),
        ("b", 1),
    ]


def test_equal_loads_go_to_the_lowest_slot():
    assigned = assign_slots([block("p", n, 1) for n in range(4)], 4)
    assert [b.slot for b in assigned] == [0, 1, 2, 3]


def test_more_slots_than_blocks_leaves_slots_empty_but_listed():
    plan = build_plan([group("p", "0", 3)], subscribers=3, duplicates_dropped=0, rejected=0)
    assert [(s.slot, s.events, s.blocks) for s in plan.slots] == [(0, 3, 1), (1, 0, 0), (2, 0, 0)]
    assert plan.skew == 3.0


def test_skew_is_max_over_mean_and_one_when_empty():
    assert skew([6, 2]) == 1.5
    assert skew([0, 0]) == 1.0
    assert skew([]) == 1.0
    assert skew([1, 1, 1]) == 1.0


def test_assign_slots_refuses_zero_subscribers():
    with pytest.raises(ValueError, match="at least 1"):
        assign_slots([], 0)


def test_partitions_stay_ints_only_when_every_group_is_integral():
    ints = resolve_partitions([group("p", "3", 1), group("p", "0", 1)])
    assert [b.partition for b in ints] == [3, 0]
    mixed = resolve_partitions([group("p", "3", 1), group("p", "x", 1, all_int=False)])
    assert [b.partition for b in mixed] == ["3", "x"]


def test_plan_json_has_exactly_the_documented_shape(tmp_path):
    groups = [group("pub", "1", 4), group("pub", "2", 3), group("other", "1", 3)]
    plan = build_plan(groups, subscribers=2, duplicates_dropped=5, rejected=7, id_scope="channel")
    write_plan_local(plan, tmp_path)
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert list(doc) == [
        "subscribers",
        "ids",
        "total_events",
        "duplicates_dropped",
        "rejected",
        "blocks",
        "slots",
        "skew",
    ]
    assert doc["subscribers"] == 2
    assert doc["ids"] == "channel"  # which rows counted as duplicates
    assert doc["total_events"] == 10
    assert (doc["duplicates_dropped"], doc["rejected"]) == (5, 7)
    assert doc["blocks"][0] == {
        "publisher_id": "pub",
        "partition": 1,
        "count": 4,
        "first_timestamp": 1.0,
        "last_timestamp": 4.0,
        "slot": 0,
    }
    assert [(b["publisher_id"], b["partition"], b["slot"]) for b in doc["blocks"]] == [
        ("pub", 1, 0),
        ("other", 1, 1),
        ("pub", 2, 1),
    ]
    assert doc["slots"] == [
        {"slot": 0, "events": 4, "blocks": 1},
        {"slot": 1, "events": 6, "blocks": 2},
    ]
    assert doc["skew"] == 1.2
    assert not (tmp_path / "plan.json.tmp").exists()


def test_empty_batch_plan():
    plan = build_plan([], subscribers=4, duplicates_dropped=0, rejected=2)
    doc = json.loads(plan_json_text(plan))
    assert doc["total_events"] == 0
    assert doc["blocks"] == []
    assert [s["events"] for s in doc["slots"]] == [0, 0, 0, 0]
    assert doc["skew"] == 1.0
    assert doc["rejected"] == 2
    assert doc["ids"] == "publisher"  # the default, as a channel's
