"""The delivered-ID window, driven by an explicit clock (DESIGN §6)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channel_server.core import dedupe
from channel_server.core.dedupe import DeliveredIds


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(dedupe, "CHUNK_IDS", 3)
    return 3


def ids(n: int, prefix: str = "e") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_membership_and_iteration_order() -> None:
    d = DeliveredIds(max_ids=100, max_age_s=60)
    d.add_many(["a", "b"], now=0)
    d.add_many(["c"], now=1)
    assert "a" in d and "c" in d
    assert "z" not in d
    assert len(d) == 3
    assert list(d) == ["a", "b", "c"]


def test_count_bound_forgets_the_oldest(small_chunks: int) -> None:
    d = DeliveredIds(max_ids=5, max_age_s=1e9)
    d.add_many(ids(7), now=0)
    assert len(d) == 5
    assert list(d) == ids(7)[2:]
    assert "e0" not in d and "e1" not in d and "e2" in d


def test_count_bound_across_chunk_boundaries(small_chunks: int) -> None:
    d = DeliveredIds(max_ids=4, max_age_s=1e9)
    for i in range(10):
        d.add_many([f"e{i}"], now=i)
        assert len(d) == min(i + 1, 4)
        assert list(d) == [f"e{j}" for j in range(max(0, i - 3), i + 1)]


def test_age_bound_drops_whole_chunks(small_chunks: int) -> None:
    d = DeliveredIds(max_ids=100, max_age_s=10)
    d.add_many(ids(3, "a"), now=0)  # one full chunk at t=0
    d.add_many(ids(2, "b"), now=5)  # a new chunk at t=5
    assert d.expire(now=10) == 0  # exactly max_age: still kept
    assert len(d) == 5
    assert d.expire(now=10.5) == 3
    assert list(d) == ["b0", "b1"]
    assert d.expire(now=15.5) == 2
    assert len(d) == 0
    assert list(d) == []
    assert d.expire(now=100) == 0


def test_expire_returns_count_for_count_bound(small_chunks: int) -> None:
    d = DeliveredIds(max_ids=10, max_age_s=1e9)
    d.add_many(ids(8), now=0)
    d.max_ids = 3
    assert d.expire(now=0) == 5
    assert list(d) == ["e5", "e6", "e7"]


def test_add_many_expires_by_age(small_chunks: int) -> None:
    d = DeliveredIds(max_ids=100, max_age_s=10)
    d.add_many(ids(3, "old"), now=0)
    d.add_many(["new"], now=20)
    assert list(d) == ["new"]


def test_id_is_remembered_for_the_whole_age_window(small_chunks: int) -> None:
    # An id added at t must stay known until t + max_age_s, whatever chunk it went into.
    d = DeliveredIds(max_ids=100, max_age_s=10)
    d.add_many(["first"], now=0)  # starts a chunk at t=0 that is not full
    d.add_many(["later"], now=9)
    d.expire(now=10.5)
    assert "later" in d  # added 1.5 s ago


def test_id_added_to_an_old_chunk_is_not_forgotten_at_once() -> None:
    # A quiet channel: one publish, then the next one a little over a day later.
    d = DeliveredIds(max_ids=1_000_000, max_age_s=24 * 3600.0)
    d.add_many(["x"], now=0.0)
    d.add_many(["y"], now=24 * 3600.0 + 1)
    assert "y" in d  # a retry of "y" one second later must be a duplicate


@given(
    steps=st.lists(
        st.tuples(st.sampled_from([0.0, 0.0, 0.3, 0.7, 1.0, 2.5, 4.0]), st.integers(0, 4)),
        min_size=1,
        max_size=40,
    )
)
@settings(max_examples=200, deadline=None, derandomize=True, database=None)
def test_age_window_is_never_early_and_at_most_one_span_late(steps: list) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dedupe, "CHUNK_IDS", 3)
        mp.setattr(dedupe, "CHUNK_SPANS", 10)  # span = 10 s / 10 = 1 s
        d = DeliveredIds(max_ids=10_000, max_age_s=10.0)
        span = 1.0
        now, added = 0.0, {}
        for step, (dt, count) in enumerate(steps):
            now += dt
            fresh = [f"s{step}-{i}" for i in range(count)]
            d.add_many(fresh, now)
            added.update((event_id, now) for event_id in fresh)
            for event_id, at in added.items():
                if now - at <= 10.0:
                    assert event_id in d, (event_id, at, now)
                elif now - at > 10.0 + span:
                    assert event_id not in d, (event_id, at, now)
            assert len(d) == len(list(d))


def test_restore_of_a_long_run_with_one_time_keeps_order_and_the_count_bound() -> None:
    window = DeliveredIds(max_ids=10_000, max_age_s=100.0)
    ids = [f"e{i}" for i in range(12_000)]
    window.restore([("", i, 5.0) for i in ids] + [("", "e0", 6.0), ("", "late", 6.0)])
    assert list(window) == [*ids[2_001:], "late"]  # the oldest 2,001 went; e0 was a repeat
    assert len(window) == 10_000
    assert window.expired_total == 2_001


def test_realms_keep_ids_apart_and_share_one_expiry_order() -> None:
    d = DeliveredIds(max_ids=2, max_age_s=1e9)
    d.add_many(["x", "y"], now=0, realm="A")
    d.add_many(["x"], now=1, realm="B")  # B's x is not A's; the window forgets A's x
    assert (set(d.known("A")), set(d.known("B")), len(d)) == ({"y"}, {"x"}, 2)
    assert list(d.entries()) == [("A", "y"), ("B", "x")]
    assert "x" not in d  # ``in`` asks the channel-wide realm
    d.add_many(["z"], now=2, realm="B")
    assert (set(d.known("A")), list(d.entries())) == (set(), [("B", "x"), ("B", "z")])


def test_restore_keeps_each_realm() -> None:
    window = DeliveredIds(max_ids=100, max_age_s=100.0)
    window.restore([("A", "x", 1.0), ("B", "x", 1.0), ("B", "x", 1.0), ("", "y", 2.0)])
    assert list(window.entries()) == [("A", "x"), ("B", "x"), ("", "y")]
    assert "y" in window and "x" in window.known("A") and "y" not in window.known("A")
