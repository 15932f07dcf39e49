"""scripts/bench_scale.py's pure helpers: the values flags, the ratio column, the tables
(the benchmark itself runs by hand: timing is for benchmarks, not tests)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture
def scale(import_script: Callable[[str], ModuleType]) -> ModuleType:
    return import_script("bench_scale")


def test_values_are_comma_separated_integers(scale: ModuleType) -> None:
    assert scale.value_list("4,16, 64") == [4, 16, 64]
    assert scale.value_list("0,1_000_000") == [0, 1_000_000]
    for bad in ("", "4,x", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            scale.value_list(bad)


def test_each_row_is_compared_with_the_first(scale: ModuleType) -> None:
    rows = scale.with_ratios([{"events_per_s": 40_000.0}, {"events_per_s": 30_000.0}])
    assert [r["ratio"] for r in rows] == [1.0, 0.75]
    assert scale.with_ratios([]) == []


def test_markdown_shows_only_the_columns_some_row_has(scale: ModuleType) -> None:
    row = {"value": 1_000, "events_per_s": 1234.5, "ratio": 1.0, "p99_ms": None}
    text = scale.markdown({"partitions": [row]})
    assert "| value | events_per_s | ratio |" in text
    assert "| 1,000 | 1,234 | 1.00 |" in text  # round half to even: 1234.5 -> 1,234
    assert "p99_ms" not in text and "restart_s" not in text


def test_the_cpu_splits_into_a_part_per_event_and_a_part_per_push(scale: ModuleType) -> None:
    # 10 µs per event and 700 µs per push: 80 µs at 10 events a push, 17 at 100
    rows = [
        {"events_per_push": n, "cpu_us_per_event": 10 + 700 / n, "subs_cpu_us_per_event": None}
        for n in (10.0, 25.0, 100.0)
    ]
    per_event, per_push = scale.push_cost(rows, "cpu_us_per_event")
    assert (round(per_event, 6), round(per_push, 6)) == (10.0, 700.0)
    assert scale.push_cost(rows, "subs_cpu_us_per_event") is None
    assert scale.push_cost(rows[:1], "cpu_us_per_event") is None  # one push size: no line
    text = scale.markdown({"prefetch": rows})
    assert "broker: 10.0 µs per event + 700 µs per push" in text
    assert "subscribers:" not in text
    # another sweep's push sizes vary too, but with other costs: no line (it fitted
    # "367.0 µs per event + -34,562 µs per push" to 16 and 10,000 partitions)
    assert "per push" not in scale.markdown({"partitions": rows})


def test_a_paired_row_takes_the_median_of_its_pairs(scale: ModuleType) -> None:
    runs = [{"value": 10_000, "events_per_s": v, "p99_ms": v / 1000} for v in (30.0, 20.0, 36.0)]
    bases = [{"value": 16, "events_per_s": v} for v in (40.0, 40.0, 0.0)]  # the last failed
    row = scale.paired_row(runs, bases)
    assert row["pairs"] == [0.75, 0.5, None]
    assert row["ratio"] == 0.625  # the median of the pairs that have a ratio
    assert (row["events_per_s"], row["p99_ms"]) == (30.0, 0.03)  # the median run's figures
    assert scale.median_row(bases) == {"value": 16, "events_per_s": 40.0, "ratio": 1.0}


def test_rows_with_a_target_say_whether_it_is_met(scale: ModuleType) -> None:
    rows = [
        {"value": 16, "ratio": 1.0},
        {"value": 10_000, "ratio": 0.79},
        {"value": 100_000, "ratio": 0.5},
    ]
    marked = scale.with_targets("partitions", rows)
    assert [r.get("target") for r in marked] == [None, ">= 0.8 ✗", ">= 0.5 ✓"]
    assert scale.with_targets("channels", rows) == rows  # no bounds for that sweep
    alone = [{"value": 100_000, "ratio": 1.0}]  # its own baseline: the bound does not apply
    assert scale.with_targets("partitions", alone) == alone
    text = scale.markdown({"partitions": [marked[1] | {"pairs": [0.79, None]}]})
    assert "| >= 0.8 ✗ | 0.79 · failed |" in text


def test_pairs_alternate_which_value_runs_first(
    scale: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    order = []

    def fake_row(s: object, name: str, value: int) -> dict[str, object]:
        order.append(value)
        return {"value": value, "events_per_s": 100.0 if value == 16 else 80.0}

    monkeypatch.setattr(scale, "one_row", fake_row)
    rows = scale.paired_sweep(None, "partitions", [16, 10_000], 3)
    assert order == [16, 10_000, 10_000, 16, 16, 10_000]
    assert [r["ratio"] for r in rows] == [1.0, 0.8]
    assert rows[1]["pairs"] == [0.8, 0.8, 0.8]


def test_the_open_sweep_warms_the_runs_own_partitions(
    scale: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``partitions`` rows open every partition they use (the warm-up has a publisher of
    its own); ``open`` rows run on partitions the warm-up opened as the run's publisher."""
    runs: dict[str, object] = {}

    def fake_run(s: object, label: str, run: int, count: int, batch: int) -> dict[str, object]:
        runs[label] = s
        return {}

    monkeypatch.setattr(scale.bench, "pipeline_run", fake_run)
    s = scale.settings(scale.build_parser().parse_args([]), Path("."))
    scale.SWEEP["partitions"](s, 10_000)
    scale.SWEEP["open"](s, 10_000)
    assert runs["parts10000"].open_partitions is False
    assert runs["open10000"].open_partitions is True
    assert runs["open10000"].partitions == 10_000


def test_bench_subscribers_leave_out_warm_up_events_under_any_publisher(
    import_script: Callable[[str], ModuleType],
) -> None:
    service = import_script("bench_support.service")
    sub = import_script("bench_support.sub")
    recorder = sub.Recorder(service.WARMUP_PUBLISHER, max_samples=10)
    own = service.EventMaker(service.WARMUP_PUBLISHER, 4, 10, id_prefix="warmup").batch(2)
    as_run = service.EventMaker("run1", 4, 10, id_prefix="warmup").batch(3)
    run = service.EventMaker("run1", 4, 10).batch(5)
    for event in own + as_run + run:
        recorder.handle({**event, "attempt": 1})
    assert (recorder.skipped, recorder.count, recorder.duplicates) == (5, 5, 0)
    assert {e["id"] for e in as_run}.isdisjoint(e["id"] for e in run)


def test_separate_cpus_pins_the_broker_and_keeps_the_subscribers_off_its_cpu(
    scale: ModuleType, tmp_path: Path
) -> None:
    """``--separate-cpus`` reaches the settings of a sweep: the broker at ``--cpu 0``,
    the bench subscribers started under ``taskset`` with every other CPU."""
    import os

    from bench_support.procs import BenchError
    from bench_support.service import subscriber_cpus

    args = scale.build_parser().parse_args(["--separate-cpus"])
    s = scale.settings(args, tmp_path)
    assert s.separate_cpus
    assert s.broker_args[-2:] == ["--cpu", "0"]
    default = scale.settings(scale.build_parser().parse_args([]), tmp_path)
    assert not default.separate_cpus
    assert "--cpu" not in default.broker_args
    allowed = os.sched_getaffinity(0)
    if 0 in allowed and len(allowed) > 1:
        taskset, flag, cpus = subscriber_cpus()
        assert (taskset, flag) == ("taskset", "-c")
        assert {int(c) for c in cpus.split(",")} == allowed - {0}
    else:
        with pytest.raises(BenchError):
            subscriber_cpus()
