"""Properties: every way of planning a batch gives the same plan.

* the reference's columnar (pyarrow) path and its row path, on many examples (no Spark);
* the Spark job and the reference, on a few (each costs a few Spark jobs).

Values come from small pools so duplicate ids and timestamp ties are common; "echoes" (a
copy of a row with the same id and timestamp and one other field changed) exercise the
dedupe tie-break on nearly every example; some rows break a rule; batches may be empty.
Each example compares plan.json byte for byte, the rejects by reason, and every block's
events in order, under either id scope (what a duplicate is).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spark_partitions.columnar import load_table
from spark_partitions.config import PlanConfig
from spark_partitions.formats import Format
from spark_partitions.reference import run_reference
from spark_partitions.rules import IdScope

pytestmark = pytest.mark.slow

PATH_EXAMPLES = 120
SPARK_EXAMPLES = 15
PAYLOAD_LIMIT = 8
SETTINGS = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}


def mostly(valid: st.SearchStrategy, invalid: st.SearchStrategy) -> st.SearchStrategy:
    """About one value in five from ``invalid``: most rows stay valid so dedupe has work."""
    return st.one_of(valid, valid, valid, valid, invalid)


ids = mostly(st.sampled_from(["a", "b", "c", "d", "e"]), st.sampled_from(["", None, "x" * 257]))
publishers = mostly(
    st.sampled_from(["p1", "p2", "P.x-_9"]), st.sampled_from(["bad id", "p\n", None])
)
int_partitions = st.sampled_from([0, 1, 2, -7, 2**62, None])
text_partitions = mostly(st.sampled_from(["x", "1", "y z", None]), st.sampled_from(["", "p" * 257]))
mixed_partitions = int_partitions | text_partitions
timestamps = mostly(
    st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0, 1e9 + 0.25, 3, 2**60 + 1])
    | st.floats(min_value=-1e15, max_value=1e15),
    st.none(),
)
# Values only the row path can judge in JSON lines: both engines must still reject them.
odd_timestamps = timestamps | st.sampled_from(["5", float("inf")])  # inf is written Infinity
payloads = mostly(st.sampled_from(["", "x", "é", "yy", "éééé", None]), st.just("0123456789"))


@st.composite
def batches(draw, partitions: st.SearchStrategy, times: st.SearchStrategy) -> list[dict]:
    row = st.fixed_dictionaries(
        {"id": ids, "publisher_id": publishers, "timestamp": times},
        optional={"partition": partitions, "payload": payloads},
    )
    batch = draw(st.lists(row, max_size=12))
    varied = {"publisher_id": publishers, "partition": partitions, "payload": payloads}
    for _ in range(draw(st.integers(0, 5)) if batch else 0):
        echo = dict(draw(st.sampled_from(batch)))
        field = draw(st.sampled_from(sorted(varied)))
        echo[field] = draw(varied[field])
        batch.append(echo)
    return draw(st.permutations(batch))


# One partition type per batch, so JSON lines take the columnar path too.
typed_batches = st.sampled_from([int_partitions, text_partitions]).flatmap(
    lambda partitions: batches(partitions, timestamps)
)

TIE = [
    {"id": "a", "publisher_id": "p1", "timestamp": 1.0, "payload": "y"},
    {"id": "a", "publisher_id": "p1", "timestamp": 1.0, "payload": "x"},
    {"id": "a", "publisher_id": "p1", "timestamp": 1.0},
    {"id": "b", "publisher_id": "p2", "partition": 1, "timestamp": 1.0},
    {"id": "b", "publisher_id": "p2", "partition": "1", "timestamp": 1.0},
    {"id": "c", "publisher_id": "p2", "partition": 0, "timestamp": 2.0},
    {"id": "c", "publisher_id": "p1", "partition": 0, "timestamp": 2.0},
]


scopes = st.sampled_from(list(IdScope))


@settings(max_examples=PATH_EXAMPLES, **SETTINGS)
@given(batch=typed_batches, fmt=st.sampled_from([Format.JSONL, Format.PARQUET]), scope=scopes)
def test_columnar_and_row_paths_agree(kit, tmp_path, batch, fmt, scope):
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    source = kit.write_batch(work / f"in{kit.suffix[fmt]}", batch, fmt)
    assert load_table(str(source), fmt) is not None  # these inputs all take the fast path
    config = PlanConfig(2, max_payload_bytes=PAYLOAD_LIMIT, id_scope=scope)
    fast = run_reference(str(source), fmt, str(work / "fast"), config)
    rows = run_reference(str(source), fmt, str(work / "rows"), config, columnar=False)
    assert (work / "fast" / "plan.json").read_text() == (work / "rows" / "plan.json").read_text()
    assert fast.reject_reasons == rows.reject_reasons
    assert kit.block_listing(work / "fast") == kit.block_listing(work / "rows")


@pytest.mark.spark
@settings(max_examples=SPARK_EXAMPLES, **SETTINGS)
@example(batch=TIE, fmt=Format.JSONL, subscribers=2, scope=IdScope.PUBLISHER)
@example(batch=TIE, fmt=Format.JSONL, subscribers=2, scope=IdScope.CHANNEL)
@example(batch=[], fmt=Format.PARQUET, subscribers=1, scope=IdScope.PUBLISHER)
@given(
    batch=batches(mixed_partitions, odd_timestamps),
    fmt=st.sampled_from(list(Format)),
    subscribers=st.integers(min_value=1, max_value=3),
    scope=scopes,
)
def test_spark_and_reference_agree(spark, kit, tmp_path, batch, fmt, subscribers, scope):
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    source = kit.write_batch(work / f"in{kit.suffix[fmt]}", batch, fmt)
    config = PlanConfig(
        subscribers, max_payload_bytes=PAYLOAD_LIMIT, shuffle_partitions=2, id_scope=scope
    )
    outcome = kit.engines_agree(spark, work, source, fmt, config)
    plan = outcome.plan
    assert plan.total_events + plan.duplicates_dropped + plan.rejected == len(batch)


def test_inputs_the_fast_path_cannot_judge_go_row_by_row(kit, tmp_path):
    mixed = [{"id": "a", "publisher_id": "p", "timestamp": 1, "partition": p} for p in (1, "x")]
    cases = {
        "mixed.jsonl": mixed,
        "typed.jsonl": [{"id": 5, "publisher_id": "p", "timestamp": 1}],
        "extra.jsonl": [{"id": "a", "publisher_id": "p", "timestamp": 1, "note": 1}],
        "nan.jsonl": ['{"id": "a", "publisher_id": "p", "timestamp": NaN}'],
        "dup.jsonl": ['{"id": "a", "id": "b", "publisher_id": "p", "timestamp": 1}'],
    }
    for name, rows in cases.items():
        path = kit.write_batch(tmp_path / name, rows, Format.JSONL)
        assert load_table(str(path), Format.JSONL) is None, name
    assert load_table(str(tmp_path / "mixed.jsonl"), Format.CSV) is None
