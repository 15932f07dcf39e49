"""Synthetic batches: reproducible, with the asked-for duplicates and invalid rows."""

from __future__ import annotations

import pytest

from spark_partitions.config import PlanConfig
from spark_partitions.formats import Format
from spark_partitions.generate import GenerateConfig, generate, iter_events
from spark_partitions.reference import run_reference


def test_same_seed_same_rows_and_another_seed_other_rows():
    config = GenerateConfig(count=50, duplicates=0.2, invalid=0.1, seed=3)
    assert list(iter_events(config)) == list(iter_events(config))
    other = GenerateConfig(count=50, duplicates=0.2, invalid=0.1, seed=4)
    assert list(iter_events(config)) != list(iter_events(other))


def test_clean_batch_has_unique_valid_events_in_the_asked_ranges():
    rows = list(iter_events(GenerateConfig(count=200, publishers=3, partitions=4)))
    assert len({row[0] for row in rows}) == 200
    assert {row[1] for row in rows} <= {"pub-0", "pub-1", "pub-2"}
    assert {row[2] for row in rows} <= set(range(4))
    assert all(len(row[4]) == 100 for row in rows)


def test_every_format_plans_to_the_same_result(tmp_path):
    config = GenerateConfig(count=300, publishers=4, partitions=3, duplicates=0.1, invalid=0.1)
    plans = []
    for fmt in Format:
        path = generate(tmp_path / f"batch.{fmt.value}", config)
        outcome = run_reference(str(path), fmt, str(tmp_path / fmt.value), PlanConfig(3))
        plans.append(outcome.plan)
    assert plans[0] == plans[1] == plans[2]
    plan = plans[0]
    assert plan.duplicates_dropped > 0
    assert plan.rejected > 0
    assert plan.total_events + plan.duplicates_dropped + plan.rejected == 300


def test_zipf_makes_the_first_publishers_carry_most_events():
    rows = list(iter_events(GenerateConfig(count=2000, publishers=10, zipf=2.0)))
    share = sum(row[1] == "pub-0" for row in rows) / len(rows)
    assert share > 0.5
    uniform = list(iter_events(GenerateConfig(count=2000, publishers=10)))
    assert sum(row[1] == "pub-0" for row in uniform) / len(uniform) < 0.2


@pytest.mark.parametrize(
    "bad", [{"count": -1}, {"publishers": 0}, {"duplicates": 1.5}, {"zipf": -1.0}]
)
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        GenerateConfig(**{"count": 1, **bad})


def test_a_duplicate_repeats_its_source_s_publisher_too():
    """It drew its publisher afresh, so under ids unique per publisher (the default) only
    1 in ``publishers`` of the asked-for duplicates was one (session 34's newcomer)."""
    rows = list(iter_events(GenerateConfig(count=2000, publishers=8, duplicates=0.2, seed=5)))
    publishers: dict[str, set[str]] = {}
    for row in rows:
        publishers.setdefault(row[0], set()).add(row[1])
    assert len(rows) - len(publishers) > 300  # about 20 % repeat an earlier id
    assert all(len(named) == 1 for named in publishers.values())
