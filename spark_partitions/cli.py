"""``python -m spark_partitions plan|generate``: the command line of DESIGN §10 and §12.

Every failure the user can fix (bad flag, missing input, pyspark absent) is one line on
stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import fields

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
from spark_partitions.rules import DEFAULT_MAX_PAYLOAD_BYTES

PROG = "spark_partitions"
DEFAULT_MASTER = "local[*]"
EXIT_USAGE = 2
EXIT_FAILURE = 1
# spark-submit starts the JVM first and tells the Python driver where it is.
SPARK_SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _bounded_int(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def _bounded_float(low: float, high: float = math.inf) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    parse.__name__ = f"number in [{low}, {high}]"
    return parse


_fraction = _bounded_float(0.0, 1.0)
_non_negative = _bounded_float(0.0)


_GENERATE_FLAGS = [
    ("--publishers", _bounded_int(1), "P", "distinct publisher ids"),
    ("--partitions", _bounded_int(1), "K", "distinct partitions per publisher"),
    ("--payload-size", _bounded_int(0), "B", "payload characters"),
    ("--duplicates", _fraction, "FRACTION", "fraction of rows repeating an earlier id"),
    ("--invalid", _fraction, "FRACTION", "fraction of rows breaking a rule"),
    (
        "--zipf",
        _non_negative,
        "S",
        "publisher popularity exponent: 0 is uniform, 1 or more makes a few publishers "
        "carry most events",
    ),
    ("--seed", int, "S", "random seed"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Plan a large publish batch: validate, dedupe, group into blocks by "
        "(publisher_id, partition) and balance the blocks over subscriber slots.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
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
        type=_bounded_int(1),
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
    plan.add_argument(
        "--auto-spark-rows",
        type=_bounded_int(0),
        metavar="ROWS",
        default=DEFAULT_AUTO_SPARK_ROWS,
        help=f"row count from which auto picks Spark (default {DEFAULT_AUTO_SPARK_ROWS:,})",
    )
    plan.add_argument(
        "--max-payload-bytes",
        type=_bounded_int(1),
        metavar="B",
        default=DEFAULT_MAX_PAYLOAD_BYTES,
        help=f"largest valid payload in UTF-8 bytes (default {DEFAULT_MAX_PAYLOAD_BYTES})",
    )
    plan.add_argument(
        "--reject-examples",
        type=_bounded_int(0),
        metavar="K",
        default=DEFAULT_REJECT_EXAMPLES,
        help=f"rejected rows to echo in the summary (default "
        f"{DEFAULT_REJECT_EXAMPLES}); all of them are in DIR/rejects/",
    )
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
    spark.add_argument(
        "--shuffle-partitions",
        type=_bounded_int(1),
        metavar="P",
        default=DEFAULT_SHUFFLE_PARTITIONS,
        help=f"shuffle partitions, hence block files (default "
        f"{DEFAULT_SHUFFLE_PARTITIONS}; raise it on a big cluster)",
    )


def _add_generate(commands) -> None:
    gen = commands.add_parser(
        "generate",
        help="write a synthetic batch file for tests and benchmarks",
        description="Write a reproducible synthetic batch (format from the extension of OUT "
        "or --format).",
    )
    gen.add_argument("out", metavar="OUT", help="file to write")
    gen.add_argument(
        "--count", required=True, type=_bounded_int(0), metavar="N", help="rows to write"
    )
    defaults = {field.name: field.default for field in fields(GenerateConfig)}
    for flag, parse, metavar, text in _GENERATE_FLAGS:
        default = defaults[flag.removeprefix("--").replace("-", "_")]
        gen.add_argument(
            flag, type=parse, default=default, metavar=metavar, help=f"{text} (default {default})"
        )
    gen.add_argument(
        "--format",
        choices=[f.value for f in Format],
        help="file format (default: from the extension of OUT)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except PlanError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        if getattr(args, "traceback", False):
            raise
        first_line = (str(exc).strip().splitlines() or [""])[0]
        print(f"{PROG}: failed: {type(exc).__name__}: {first_line}", file=sys.stderr)
        return EXIT_FAILURE


def _plan(args: argparse.Namespace) -> int:
    from spark_partitions.engine import Engine, Request, run

    config = PlanConfig(
        subscribers=args.subscribers,
        max_payload_bytes=args.max_payload_bytes,
        shuffle_partitions=args.shuffle_partitions,
        reject_examples=args.reject_examples,
    )
    request = Request(
        input_path=args.input,
        out_dir=args.out,
        fmt=detect_format(args.input, args.format),
        config=config,
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
        "total_events": plan.total_events,
        "blocks": len(plan.blocks),
        "duplicates_dropped": plan.duplicates_dropped,
        "rejected": plan.rejected,
        "skew": plan.skew,
        "reject_reasons": outcome.reject_reasons,
        "out": out,
    }


def _master(flag: str | None) -> str | None:
    if flag:
        return flag
    return None if os.environ.get(SPARK_SUBMIT_ENV) else DEFAULT_MASTER


def _generate(args: argparse.Namespace) -> int:
    from spark_partitions.generate import generate

    config = GenerateConfig(
        count=args.count,
        publishers=args.publishers,
        partitions=args.partitions,
        payload_size=args.payload_size,
        duplicates=args.duplicates,
        invalid=args.invalid,
        zipf=args.zipf,
        seed=args.seed,
    )
    path = generate(args.out, config, Format(args.format) if args.format else None)
    print(f"wrote {args.count} rows to {path}")
    return 0


_COMMANDS = {"plan": _plan, "generate": _generate}
