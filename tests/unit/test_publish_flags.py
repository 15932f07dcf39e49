"""``publisher publish`` refuses a flag of the other source instead of ignoring it (issue
14, item 8): ``--spark`` and the plan's flags are for ``--file``, the synthetic-event flags
for ``--count``. The check runs before anything connects: exit 2 and one line."""

from __future__ import annotations

import pytest

from publisher.batch_file import DEFAULT_SPARK_THRESHOLD_ROWS
from publisher.cli import main
from publisher.client import DEFAULT_PARTITIONS
from publisher.flags import DEFAULT_PAYLOAD, build_parser

PUBLISH = ["publish", "--channel", "c", "--id", "P"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--count", "3", "--spark", "always"], "--spark does not apply to --count"),
        (["--count", "3", "--spark-threshold", "10"], "--spark-threshold does not apply"),
        (["--count", "3", "--subscribers", "2"], "--subscribers does not apply to --count"),
        (["--count", "3", "--master", "spark://h:7077"], "--master does not apply to --count"),
        (["--file", "b.jsonl", "--partitions", "4"], "--partitions does not apply to --file"),
        (["--file", "b.jsonl", "--rate", "5"], "--rate does not apply to --file"),
        (["--file", "b.jsonl", "--start-seq", "7"], "--start-seq does not apply to --file"),
        (["--file", "b.jsonl", "--submit"], "--submit does not apply to --file"),
        (
            ["--count", "3", "--submit", "--kill-queues-at", "1"],
            "--kill-queues-at does not apply to --submit",
        ),
    ],
)
def test_a_flag_of_the_other_source_is_refused_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*PUBLISH, *argv, "--ns-port", "1"])
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert message in lines[0]


def test_defaults_are_filled_in_for_the_source_used() -> None:
    from publisher.flags import check_publish_flags

    synthetic = build_parser().parse_args([*PUBLISH, "--count", "3"])
    assert check_publish_flags(synthetic) is None
    assert (synthetic.partitions, synthetic.payload_size) == (DEFAULT_PARTITIONS, DEFAULT_PAYLOAD)
    batch = build_parser().parse_args([*PUBLISH, "--file", "b.jsonl"])
    assert check_publish_flags(batch) is None
    assert (batch.spark, batch.spark_threshold) == ("auto", DEFAULT_SPARK_THRESHOLD_ROWS)
