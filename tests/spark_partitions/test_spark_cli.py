"""The command line: help, one-line errors, engine choice, generate then plan."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spark_partitions.cli import main
from spark_partitions.config import EngineUnavailable, PlanConfig
from spark_partitions.engine import Engine, Request, choose_engine, estimate_rows
from spark_partitions.formats import Format
from spark_partitions.generate import GenerateConfig, generate

PLAN_FLAGS = [
    "--subscribers",
    "--out",
    "--format",
    "--engine",
    "--ids",
    "--auto-spark-rows",
    "--max-payload-bytes",
    "--reject-examples",
    "--master",
    "--driver-host",
    "--driver-memory",
    "--codegen",
    "--shuffle-partitions",
    "--json",
    "--traceback",
]
GENERATE_FLAGS = [
    "--count",
    "--publishers",
    "--partitions",
    "--payload-size",
    "--duplicates",
    "--invalid",
    "--zipf",
    "--format",
    "--seed",
]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spark_partitions", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_help_explains_every_flag():
    result = _run("plan", "--help")
    assert result.returncode == 0
    for flag in PLAN_FLAGS:
        assert flag in result.stdout
    result = _run("generate", "--help")
    assert result.returncode == 0
    for flag in GENERATE_FLAGS:
        assert flag in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "in.jsonl", "--subscribers", "0", "--out", "o"], "must be at least 1, got '0'"),
        (["plan", "in.jsonl", "--subscribers", "two", "--out", "o"], "not an integer: 'two'"),
        (["plan", "in.jsonl", "--subscribers", "2"], "--out"),
        (["plan", "in.jsonl", "--subscribers", "2", "--out", "o", "--engine", "x"], "invalid"),
        (["plan", "missing.jsonl", "--subscribers", "2", "--out", "o"], "input not found"),
        (["plan", "in.txt", "--subscribers", "2", "--out", "o"], "unknown extension '.txt'"),
        (["generate", "g.jsonl", "--count", "5", "--invalid", "2"], "between 0 and 1, got '2'"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_a_nonzero_exit(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(args))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert message in err
    assert "Traceback" not in err


def test_spark_engine_without_pyspark_says_how_to_install(tmp_path):
    batch = generate(tmp_path / "in.jsonl", GenerateConfig(count=3))
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from spark_partitions.cli import main\n"
        f"sys.exit(main(['plan', {str(batch)!r}, '--subscribers', '2', "
        f"'--out', {str(tmp_path / 'out')!r}, '--engine', 'spark']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "spark_partitions: error: pyspark is not installed: install the spark extra: "
        "pip install -e '.[spark]'"
    ]


def test_generate_then_plan_with_the_reference(tmp_path, capsys):
    batch = str(tmp_path / "in.csv")
    assert main(["generate", batch, "--count", "40", "--duplicates", "0.1", "--seed", "2"]) == 0
    out = str(tmp_path / "out")
    assert main(["plan", batch, "--subscribers", "3", "--out", out, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["engine"] == "reference"
    assert figures["total_events"] + figures["duplicates_dropped"] == 40
    assert figures["duplicates_dropped"] > 0
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["subscribers"] == 3


def test_a_plan_dir_is_private_and_no_link_in_it_is_followed(tmp_path):
    """Another user who made the plan dir first and planted ``plan.json.tmp`` as a link to
    a file of the victim's had it overwritten with the plan (session 33's attacker probe),
    and the blocks and rejects, holding the payloads, were readable by everyone."""
    batch = str(tmp_path / "in.csv")
    assert main(["generate", batch, "--count", "20", "--seed", "2"]) == 0
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    (out / "plan.json.tmp").symlink_to(precious)
    assert main(["plan", batch, "--subscribers", "2", "--out", str(out)]) == 0
    assert precious.read_text() == "mine\n"
    assert json.loads((out / "plan.json").read_text())["subscribers"] == 2
    assert not (out / "plan.json").is_symlink()
    for path in (out, out / "blocks", out / "rejects"):
        assert path.stat().st_mode & 0o777 == 0o700, path
    assert (out / "plan.json").stat().st_mode & 0o777 == 0o600


CROSS_PUBLISHER = [
    {"id": "e1", "publisher_id": "a", "timestamp": 1.0},
    {"id": "e1", "publisher_id": "b", "timestamp": 2.0},
    {"id": "e1", "publisher_id": "b", "timestamp": 3.0},
    {"id": "e2", "publisher_id": "a", "timestamp": 1.0},
]
"""Id e1 of two publishers, b's twice."""


@pytest.mark.parametrize(
    ("flags", "scope", "kept", "dropped", "said"),
    [
        ([], "publisher", 3, 1, "1 duplicates dropped (same publisher_id and id)"),
        (["--ids", "channel"], "channel", 2, 2, "2 duplicates dropped (same id, any publisher)"),
    ],
)
def test_ids_says_what_a_duplicate_is(tmp_path, capsys, flags, scope, kept, dropped, said):
    batch = tmp_path / "in.jsonl"
    batch.write_text("".join(json.dumps(row) + "\n" for row in CROSS_PUBLISHER))
    out = tmp_path / "out"
    args = ["plan", str(batch), "--subscribers", "2", "--out", str(out), *flags]
    assert main(args) == 0
    assert said in capsys.readouterr().out
    plan = json.loads((out / "plan.json").read_text())
    assert (plan["ids"], plan["total_events"], plan["duplicates_dropped"]) == (scope, kept, dropped)
    assert main([*args, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (figures["ids"], figures["duplicates_dropped"]) == (scope, dropped)


def _request(tmp_path, engine: Engine, threshold: int) -> Request:
    path = generate(tmp_path / "in.parquet", GenerateConfig(count=10))
    return Request(
        str(path),
        str(tmp_path / "out"),
        Format.PARQUET,
        PlanConfig(2),
        engine,
        auto_spark_rows=threshold,
    )


def test_auto_uses_the_reference_below_the_threshold_and_spark_from_it(tmp_path):
    assert choose_engine(_request(tmp_path, Engine.AUTO, 11)) is Engine.REFERENCE
    assert choose_engine(_request(tmp_path, Engine.AUTO, 10)) is Engine.SPARK
    assert choose_engine(_request(tmp_path, Engine.REFERENCE, 0)) is Engine.REFERENCE


def test_auto_falls_back_to_the_reference_without_pyspark(tmp_path, monkeypatch, capsys):
    def missing() -> None:
        raise EngineUnavailable("pyspark is not installed")

    monkeypatch.setattr("spark_partitions.engine.require_pyspark", missing)
    assert choose_engine(_request(tmp_path, Engine.AUTO, 1)) is Engine.REFERENCE
    assert "planning with the reference engine" in capsys.readouterr().err


def test_row_estimate_counts_lines_of_text_and_rows_of_parquet(tmp_path):
    for fmt in Format:
        path = generate(tmp_path / f"in.{fmt.value}", GenerateConfig(count=25))
        header = 1 if fmt is Format.CSV else 0
        assert estimate_rows(str(path), fmt) == 25 + header
