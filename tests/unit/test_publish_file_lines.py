"""Invalid rows of a batch file are named by where they are (issue 14, item 8): the line
of a JSON-lines row (blank lines counted), the line a CSV record starts on (a quoted field
may span lines), the row number of a Parquet row; the publisher's summary names the first
few and counts the rest."""

from __future__ import annotations

import json
from pathlib import Path

from publisher.batch_file import REJECT_LOCATIONS, FileReport
from publisher.client import PublishTotals
from spark_partitions.formats import Format
from spark_partitions.reader import Location, read_located_rows, read_rows

GOOD = {"id": "a", "publisher_id": "p", "partition": 0, "timestamp": 1.0, "payload": "x"}


def where(path: Path, fmt: Format) -> list[tuple[str, str | None]]:
    """(location, reject reason or None) of every row read."""
    return [
        (str(loc), None if row.reason is None else str(row.reason))
        for loc, row in read_located_rows(str(path), fmt)
    ]


def test_json_lines_are_numbered_as_an_editor_shows_them(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    lines = [json.dumps(GOOD), "", "not json", "  ", json.dumps(dict(GOOD, id="b"))]
    path.write_text("\r\n".join(lines) + "\n")
    assert where(path, Format.JSONL) == [
        ("line 1", None),
        ("line 3", "malformed JSON"),
        ("line 5", None),
    ]
    # read_rows (the reference engine's) yields the same rows without locations
    assert [r.reason for r in read_rows(str(path), Format.JSONL)] == [
        None,
        "malformed JSON",
        None,
    ]


def test_a_csv_record_is_named_by_the_line_it_starts_on(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text('id,publisher_id,timestamp,payload\na,p,1,"two\nlines"\n\nb,p\nc,p,3,x\n')
    assert where(path, Format.CSV) == [
        ("line 2", None),
        ("line 5", "wrong number of CSV fields"),
        ("line 6", None),
    ]


def test_a_parquet_row_is_named_by_its_number_in_its_file(tmp_path: Path) -> None:
    import pyarrow as pa  # the spark extra, which scripts/test.sh installs
    import pyarrow.parquet as pq

    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "timestamp": [1.0, 2.0, 3.0]}), path)
    locations = [loc for loc, _ in read_located_rows(str(path), Format.PARQUET)]
    assert [str(loc) for loc in locations] == ["row 1", "row 2", "row 3"]
    assert locations[0] == Location(path, 1, line_is_row=True)


def test_the_summary_names_the_first_invalid_rows_and_counts_the_rest() -> None:
    report = FileReport(PublishTotals(), rows=100, rejected=REJECT_LOCATIONS + 3)
    report.reject_where = [f"line {n}" for n in range(1, REJECT_LOCATIONS + 1)]
    named = ", ".join(report.reject_where)
    assert report.rejects_line() == f"13 invalid rows were not published: {named} and 3 more"
    one = FileReport(PublishTotals(), rows=5, rejected=1, reject_where=["line 4"])
    assert one.rejects_line() == "1 invalid row was not published: line 4"
    planned = FileReport(PublishTotals(), rows=5, rejected=2, planned=True)
    assert planned.rejects_line() == (
        "2 invalid rows were not published (a Spark plan knows no line numbers: --spark "
        "never names them)"
    )
