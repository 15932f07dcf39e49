"""The row rules both engines implement, checked on the pure-Python side."""

from __future__ import annotations

import pytest

from spark_partitions.formats import Format
from spark_partitions.reader import parse_json_line, read_located_rows
from spark_partitions.rules import Clean, Reason, check, csv_value

LIMIT = 8


def row(**fields):
    base = {"id": "e1", "publisher_id": "pub", "partition": 0, "timestamp": 1.0, "payload": "x"}
    base.update(fields)
    return tuple(base[name] for name in ("id", "publisher_id", "partition", "timestamp", "payload"))


def test_a_valid_row_is_cleaned():
    assert check(row(), LIMIT) == Clean("e1", "pub", "0", True, 1.0, "x")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"id": None}, Reason.ID_REQUIRED),
        ({"id": ""}, Reason.ID_TYPE),
        ({"id": 5}, Reason.ID_TYPE),
        ({"id": "x" * 257}, Reason.ID_LENGTH),
        ({"publisher_id": None}, Reason.PUBLISHER_REQUIRED),
        ({"publisher_id": "has space"}, Reason.PUBLISHER_FORMAT),
        ({"publisher_id": "pub\n"}, Reason.PUBLISHER_FORMAT),
        ({"publisher_id": "p" * 129}, Reason.PUBLISHER_FORMAT),
        ({"partition": 1.5}, Reason.PARTITION_TYPE),
        ({"partition": True}, Reason.PARTITION_TYPE),
        ({"partition": ""}, Reason.PARTITION_LENGTH),
        ({"partition": "p" * 257}, Reason.PARTITION_LENGTH),
        ({"partition": 2**63}, Reason.PARTITION_RANGE),
        ({"timestamp": None}, Reason.TIMESTAMP_REQUIRED),
        ({"timestamp": "5"}, Reason.TIMESTAMP_TYPE),
        ({"timestamp": True}, Reason.TIMESTAMP_TYPE),
        ({"timestamp": float("inf")}, Reason.TIMESTAMP_FINITE),
        ({"timestamp": float("nan")}, Reason.TIMESTAMP_FINITE),
        ({"timestamp": 10**400}, Reason.TIMESTAMP_FINITE),
        ({"payload": {"a": 1}}, Reason.PAYLOAD_TYPE),
        ({"payload": "é" * 5}, Reason.PAYLOAD_SIZE),
    ],
)
def test_each_rule_names_its_reason(fields, reason):
    assert check(row(**fields), LIMIT) is reason


def test_first_failing_field_wins():
    assert check(row(id="", publisher_id="bad id", timestamp=None), LIMIT) is Reason.ID_TYPE


def test_defaults_and_normalisation():
    cleaned = check(row(partition=None, timestamp=-0.0, payload=None), LIMIT)
    assert cleaned == Clean("e1", "pub", "0", True, 0.0, None)
    assert str(cleaned.timestamp) == "0.0"
    assert check(row(partition="a", timestamp=3), LIMIT) == Clean("e1", "pub", "a", False, 3.0, "x")
    assert check(row(payload="é" * 4), LIMIT).payload == "é" * 4  # exactly 8 bytes


@pytest.mark.parametrize(
    ("field", "text", "value"),
    [
        ("partition", "12", 12),
        ("partition", "-3", -3),
        ("partition", "007", "007"),
        ("partition", "9223372036854775808", "9223372036854775808"),
        ("partition", "x", "x"),
        ("timestamp", "1.5", 1.5),
        ("timestamp", "1e3", 1000.0),
        ("timestamp", "nan", "nan"),
        ("timestamp", " 1", " 1"),
        ("timestamp", "1_0", "1_0"),
        ("id", "12", "12"),
        ("payload", "", None),
    ],
)
def test_csv_cells_are_typed_like_spark_types_them(field, text, value):
    assert csv_value(field, text) == value
    assert type(csv_value(field, text)) is type(value)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", Reason.MALFORMED_JSON),
        ('{"id": NaN}', Reason.MALFORMED_JSON),
        ("[1, 2]", Reason.NOT_OBJECT),
        ('"text"', Reason.NOT_OBJECT),
        ('{"id": "a", "extra": 1}', Reason.UNKNOWN_FIELD),
    ],
)
def test_json_lines_that_have_no_fields(line, reason):
    assert parse_json_line(line).reason is reason


def test_json_repeated_key_at_any_depth_is_malformed():
    assert parse_json_line('{"id": "a", "id": "b"}').reason is Reason.MALFORMED_JSON
    nested = '{"id": "a", "publisher_id": "p", "timestamp": 1, "payload": {"k": 1, "k": 2}}'
    assert parse_json_line(nested).reason is Reason.MALFORMED_JSON


def test_a_long_csv_field_and_a_bom_are_read_as_rows(tmp_path):
    """A 200 KB payload (under the channels' 1 MiB) ended a whole CSV run ("field larger
    than field limit"), and a file starting with a UTF-8 BOM had its first line refused
    as malformed JSON (session 33's attacker probe)."""
    big = "x" * 200_000
    csv_file = tmp_path / "in.csv"
    csv_file.write_text(f"id,publisher_id,payload\nb1,P,{big}\nb2,P,small\n")
    rows = [row for _, row in read_located_rows(str(csv_file), Format.CSV)]
    assert [row.reason for row in rows] == [None, None]
    assert big in rows[0].values
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('\ufeff{"id": "j1", "publisher_id": "P"}\n', encoding="utf-8")
    (row,) = [row for _, row in read_located_rows(str(jsonl), Format.JSONL)]
    assert row.reason is None and "j1" in row.values
