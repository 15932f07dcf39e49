"""The least-loaded sticky assignment policy (DESIGN §5)."""

from __future__ import annotations

import pytest

from channel_server.core.assignment import MemberLoad, choose_member, least_loaded


def test_load_formula() -> None:
    member = MemberLoad("a", partitions_owned=3, events_queued=7, events_in_flight=2)
    assert member.load(10) == 3 * 10 + 7 + 2
    assert member.load(1) == 12
    assert MemberLoad("idle").load(10) == 0


def test_least_loaded_picks_the_smallest_load() -> None:
    assert least_loaded({"a": 5, "b": 2, "c": 9}) == "b"


def test_ties_go_to_the_lowest_id() -> None:
    assert least_loaded({"c": 1, "b": 1, "d": 1, "z": 0, "y": 0}) == "y"
    assert least_loaded({"m2": 4, "m10": 4}) == "m10"  # string order, deterministic


def test_empty_mapping_raises() -> None:
    with pytest.raises(ValueError, match="no active member"):
        least_loaded({})
    with pytest.raises(ValueError):
        choose_member([], 10)


def test_partitions_weigh_more_than_events() -> None:
    owner_of_one = MemberLoad("a", partitions_owned=1)
    busy_with_events = MemberLoad("b", events_queued=5, events_in_flight=4)
    # One partition weighs 10 events: b (9) is less loaded than a (10).
    assert choose_member([owner_of_one, busy_with_events], partition_weight=10) == "b"
    # With weight 1 the partition is cheap: a (1) beats b (9).
    assert choose_member([owner_of_one, busy_with_events], partition_weight=1) == "a"


def test_choose_member_tie_on_formula_goes_to_lowest_id() -> None:
    members = [MemberLoad("b", 1, 0, 0), MemberLoad("a", 0, 6, 4)]
    assert choose_member(members, 10) == "a"
    assert choose_member(list(reversed(members)), 10) == "a"
