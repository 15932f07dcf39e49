"""The least-loaded sticky assignment policy (DESIGN §5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channel_server.core.assignment import LeastLoaded, MemberLoad, choose_member, least_loaded


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


class Mutable:
    """A member whose load the test changes."""

    def __init__(self, member_id: str, load: int) -> None:
        self.member_id = member_id
        self.value = load

    def load(self, partition_weight: int) -> int:
        return self.value


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, 7), st.integers(-20, 20)), max_size=60),
)
def test_the_book_chooses_as_least_loaded_would_afresh(
    loads: list[int], steps: list[tuple[int, int]]
) -> None:
    """Hand out partitions (the chosen member's load grows by the weight) between other
    changes of loads, each reported: every choice is least_loaded's over the loads then."""
    members = [Mutable(f"m{i}", load) for i, load in enumerate(loads)]
    book = LeastLoaded(members, 10)
    for index, delta in steps:
        chosen = book.least()
        assert chosen is not None
        assert chosen.member_id == least_loaded({m.member_id: m.value for m in members})
        chosen.value += 10
        book.changed(chosen)
        other = members[index % len(members)]
        other.value = max(0, other.value + delta)
        book.changed(other)


def test_an_empty_book_has_no_member_and_ignores_strangers() -> None:
    book: LeastLoaded[Mutable] = LeastLoaded([], 10)
    assert book.least() is None
    book.changed(Mutable("stranger", 0))  # not in the book: an excluded member
    assert book.least() is None
