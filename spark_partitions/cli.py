"""``python -m spark_partitions plan|generate``: the command line of DESIGN §10 and §12.

Every failure the user can fix (bad flag, missing input, pyspark absent) is one line on
stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

from channel_client import cli_common as cc
from spark_partitions.config import (
    DEFAULT_AUTO_SPARK_ROWS,
    DEFAULT_DRIVER_HOST,
    DEFAULT_REJECT_EXAMPLES,
    DEFAULT_SHUFFLE_PARTITIONS,
    PlanConfig,
    PlanError,
    SparkSettings,
)
from spark_partitions.formats import Format, detect_format
from spark_partitions.generate import GenerateConfig
from spark_partitions.rules import DEFAULT_MAX_PAYLOAD_BYTES, IdScope

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PROG = "spark_partitions"
DEFAULT_MASTER = "local[*]"
# spark-submit starts the JVM first and tells the Python driver where it is.
SPARK_SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"

ConfigT = TypeVar("ConfigT", bound="DataclassInstance")
# A flag with a value: (flag, argparse type, metavar, default, help).
NumberFlag = tuple[str, Callable[[str], Any], str, Any, str]


def fraction(text: str) -> float:
    """argparse type of a fraction: a number from 0 to 1."""
    value = cc.non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text!r}")
    return value


_PLAN_NUMBERS: list[NumberFlag] = [
    (
        "--auto-spark-rows",
        cc.non_negative_int,
        "ROWS",
        DEFAULT_AUTO_SPARK_ROWS,
        f"row count from which auto picks Spark (default {DEFAULT_AUTO_SPARK_ROWS:,})",
    ),
    (
        "--max-payload-bytes",
        cc.positive_int,
        "B",
        DEFAULT_MAX_PAYLOAD_BYTES,
        f"largest valid payload in UTF-8 bytes (default {DEFAULT_MAX_PAYLOAD_BYTES})",
    ),
    (
        "--reject-examples",
        cc.non_negative_int,
        "K",
        DEFAULT_REJECT_EXAMPLES,
        f"rejected rows to echo in the summary (default {DEFAULT_REJECT_EXAMPLES}); all of "
        "them are in DIR/rejects/",
    ),
]
_SHUFFLE_PARTITIONS: NumberFlag = (
    "--shuffle-partitions",
    cc.positive_int,
    "P",
    DEFAULT_SHUFFLE_PARTITIONS,
    f"shuffle partitions, hence block files (default {DEFAULT_SHUFFLE_PARTITIONS}; raise it "
    "on a big cluster)",
)
# generate's flags, their defaults taken from GenerateConfig: (flag, type, metavar, help).
_GENERATE_FLAGS: list[tuple[str, Callable[[str], Any], str, str]] = [
    ("--publishers", cc.positive_int, "P", "distinct publisher ids"),
    ("--partitions", cc.positive_int, "K", "distinct partitions per publisher"),
    ("--payload-size", cc.non_negative_int, "B", "payload characters"),
    ("--duplicates", fraction, "FRACTION", "fraction of rows repeating an earlier id"),
    ("--invalid", fraction, "FRACTION", "fraction of rows breaking a rule"),
    (
        "--zipf",
        cc.non_negative_float,
        "S",
        "publisher popularity exponent: 0 is uniform, 1 or more makes a few publishers "
        "carry most events",
    ),
    ("--seed", int, "S", "random seed"),
]


def _add_numbers(parser: argparse._ActionsContainer, flags: Sequence[NumberFlag]) -> None:
    for flag, parse, metavar, default, text in flags:
        parser.add_argument(flag, type=parse, metavar=metavar, default=default, help=text)


def build_parser() -> argparse.ArgumentParser:
    parser = cc.Parser(
        prog=PROG,
        description="Plan a large publish batch: validate, dedupe, group into blocks by "
        "(publisher_id, partition) and balance the blocks over subscriber slots.",
    )
    cc.add_version_flag(parser)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=cc.Parser)
    _add_plan(commands)
    _add_generate(commands)
    return parser


def _add_plan(commands) -> None:
    plan = commands.add_parser(
        "plan",
        help="plan a batch file into DIR/plan.json and DIR/blocks/",
        description="Plan a batch: writes DIR/plan.json, the events grouped into blocks "
        "under DIR/blocks/ (Parquet) and every rejected row under DIR/rejects/ (JSON lines).",
    )
    plan.add_argument(
        "input",
        metavar="INPUT",
        help="batch file or directory: JSON lines, "
        "CSV (header row) or Parquet; a cluster path (hdfs://...) needs Spark",
    )
    plan.add_argument(
        "--subscribers",
        required=True,
        type=cc.positive_int,
        metavar="N",
        help="number of subscriber slots to balance the blocks over",
    )
    plan.add_argument("--out", required=True, metavar="DIR", help="output directory")
    plan.add_argument(
        "--format",
        choices=[f.value for f in Format],
        help="input format (default: from the file extension)",
    )
    plan.add_argument(
        "--engine",
        choices=["auto", "spark", "reference"],
        default="auto",
        help="spark: the PySpark job; reference: pure Python, in memory; "
        "auto (default): reference below --auto-spark-rows input rows",
    )
    cc.add_ids_flag(
        plan,
        IdScope.PUBLISHER.value,
        "as on the channel the batch is for: what counts as a duplicate, the same "
        "(publisher_id, id) or the same id (default publisher)",
    )
    _add_numbers(plan, _PLAN_NUMBERS)
    _add_spark_flags(plan)
    plan.add_argument(
        "--json",
        action="store_true",
        help="print the run's figures as one JSON object instead of a sentence",
    )
    plan.add_argument(
        "--traceback", action="store_true", help="show the full traceback of an unexpected failure"
    )


def _add_spark_flags(plan: argparse.ArgumentParser) -> None:
    spark = plan.add_argument_group("Spark")
    spark.add_argument(
        "--master",
        metavar="URL",
        help=f"Spark master URL (default {DEFAULT_MASTER}; under spark-submit "
        "its --master applies)",
    )
    spark.add_argument(
        "--driver-host",
        default=DEFAULT_DRIVER_HOST,
        metavar="ADDR",
        help="address the driver binds to (default 127.0.0.1; on a real "
        "cluster give one the executors can reach)",
    )
    spark.add_argument(
        "--driver-memory", metavar="SIZE", help="driver JVM heap, e.g. 2g (default: Spark's own)"
    )
    spark.add_argument(
        "--codegen",
        action="store_true",
        help="turn on Spark's whole-stage code generation (off by default: in a one-shot job "
        "compiling costs more than it saves on a small machine; try it on a big cluster)",
    )
    _add_numbers(spark, [_SHUFFLE_PARTITIONS])


def _add_generate(commands) -> None:
    gen = commands.add_parser(
        "generate",
        help="write a synthetic batch file for tests and benchmarks",
        description="Write a reproducible synthetic batch (format from the extension of OUT "
        "or --format).",
    )
    gen.add_argument("out", metavar="OUT", help="file to write")
    gen.add_argument(
        "--count", required=True, type=cc.non_negative_int, metavar="N", help="rows to write"
    )
    _add_numbers(gen, _generate_numbers())
    gen.add_argument(
        "--format",
        choices=[f.value for f in Format],
        help="file format (default: from the extension of OUT)",
    )


def _generate_numbers() -> list[NumberFlag]:
    """generate's flags, each with its GenerateConfig default named in the help."""
    defaults = {field.name: field.default for field in fields(GenerateConfig)}
    flags: list[NumberFlag] = []
    for flag, parse, metavar, text in _GENERATE_FLAGS:
        default = defaults[flag.removeprefix("--").replace("-", "_")]
        flags.append((flag, parse, metavar, default, f"{text} (default {default})"))
    return flags


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except PlanError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return cc.EXIT_USAGE
    except Exception as exc:
        if getattr(args, "traceback", False):
            raise
        first_line = (str(exc).strip().splitlines() or [""])[0]
        print(f"{PROG}: failed: {type(exc).__name__}: {first_line}", file=sys.stderr)
        return cc.EXIT_ERROR


def _plan(args: argparse.Namespace) -> int:
    from spark_partitions.engine import Engine, Request, run

    request = Request(
        input_path=args.input,
        out_dir=args.out,
        fmt=detect_format(args.input, args.format),
        config=_from_args(PlanConfig, args),
        engine=Engine(args.engine),
        auto_spark_rows=args.auto_spark_rows,
        spark=SparkSettings(
            master=_master(args.master),
            driver_host=args.driver_host,
            shuffle_partitions=args.shuffle_partitions,
            driver_memory=args.driver_memory,
            codegen=args.codegen,
        ),
    )
    started = time.perf_counter()
    outcome = run(request)
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps(_figures(outcome, seconds, args.out)))
    else:
        print(f"{outcome.summary()}; {seconds:.1f} s; plan in {args.out}")
    return 0


def _figures(outcome, seconds: float, out: str) -> dict:
    plan = outcome.plan
    return {
        "engine": outcome.engine,
        "seconds": round(seconds, 3),
        "ids": plan.id_scope,
        "total_events": plan.total_events,
        "blocks": len(plan.blocks),
        "duplicates_dropped": plan.duplicates_dropped,
        "rejected": plan.rejected,
        "skew": plan.skew,
        "reject_reasons": outcome.reject_reasons,
        "out": out,
    }


def _from_args(config_class: type[ConfigT], args: argparse.Namespace) -> ConfigT:
    """A config dataclass whose every field is the flag of the same name."""
    return config_class(**{field.name: getattr(args, field.name) for field in fields(config_class)})


def _master(flag: str | None) -> str | None:
    if flag:
        return flag
    return None if os.environ.get(SPARK_SUBMIT_ENV) else DEFAULT_MASTER


def _generate(args: argparse.Namespace) -> int:
    from spark_partitions.generate import generate

    config = _from_args(GenerateConfig, args)
    path = generate(args.out, config, Format(args.format) if args.format else None)
    print(f"wrote {args.count} rows to {path}")
    return 0


_COMMANDS = {"plan": _plan, "generate": _generate}
