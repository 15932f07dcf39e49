"""Spark readers: each input format as the same raw columns, typed as the reference types.

For every field ``f`` of :data:`~spark_partitions.rules.FIELDS` the frame has ``f`` (its
text, or a double for ``timestamp``) and ``f_kind`` (a :class:`~spark_partitions.rules.Kind`);
``pre_reason`` is set when a row could not even be split into fields, and ``record`` is the
source text for the rejects output. These mirror :mod:`spark_partitions.reader`:

* JSON lines are parsed once into a map of VARIANTs (``from_json``), which keeps each
  value's JSON type, so ``{"id": 5}`` is an int and not the string ``"5"`` a schema read
  would make of it; ``try_parse_json`` runs only on lines that are not objects, to tell
  malformed from not-an-object.
* CSV is all text: cells are typed by the regexes of :mod:`spark_partitions.rules`. The
  header names the columns (every file of a directory must share one header).
* Parquet values take the kind of their column's type.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_partitions.formats import Format
from spark_partitions.reader import check_columns
from spark_partitions.rules import (
    BLANK_LINE_BODY,
    CSV_INT_BODY,
    CSV_NUMBER_BODY,
    FIELDS,
    Kind,
    Reason,
)

CORRUPT = "_corrupt_record"
KIND_SUFFIX = "_kind"
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_FRACTIONAL = (T.FloatType, T.DoubleType, T.DecimalType)


def read_raw(spark: SparkSession, path: str, fmt: Format) -> DataFrame:
    """The raw columns (module doc) of the input at ``path``."""
    return _READERS[fmt](spark, path)


def _frame(source: DataFrame, fields: dict[str, tuple[Column, Column]], pre, record) -> DataFrame:
    columns = [pre.alias("pre_reason"), record.alias("record")]
    for name in FIELDS:
        value, kind = fields[name]
        columns += [value.alias(name), kind.alias(name + KIND_SUFFIX)]
    return source.select(*columns)


def _anchored(body: str) -> str:
    return rf"^(?:{body})\z"


def _null_kind(value: Column, kind: Column) -> Column:
    return F.when(value.isNull(), F.lit(Kind.NULL.value)).otherwise(kind)


# -- JSON lines ---------------------------------------------------------------------------
# Jackson's leniencies that Python's json module does not share are switched off.
JSON_OPTIONS = {"allowSingleQuotes": "false", "allowNonNumericNumbers": "false"}
_VTYPE = "_vtype"


def _read_jsonl(spark: SparkSession, path: str) -> DataFrame:
    """One parse per line, into a map of small variants, one per key."""
    lines = spark.read.text(path).filter(~F.col("value").rlike(_anchored(BLANK_LINE_BODY)))
    parsed = lines.select(
        F.col("value"),
        F.from_json("value", "map<string,variant>", JSON_OPTIONS).alias("obj"),
    )
    allowed = F.array(*(F.lit(name) for name in FIELDS))
    keys = F.map_keys("obj")
    malformed = F.expr("try_parse_json(value)").isNull()
    pre = (
        F.when(F.col("obj").isNull() & malformed, F.lit(Reason.MALFORMED_JSON.value))
        .when(F.col("obj").isNull(), F.lit(Reason.NOT_OBJECT.value))
        .when(F.size(keys) != F.size(F.array_distinct(keys)), F.lit(Reason.MALFORMED_JSON.value))
        .when(F.size(F.array_except(keys, allowed)) > 0, F.lit(Reason.UNKNOWN_FIELD.value))
    )
    values = parsed.select(
        pre.alias("pre_reason"),
        F.col("value").alias("record"),
        *(F.col("obj")[name].alias(name) for name in FIELDS),
    )
    # Each step its own projection, so no variant is inspected more than once per row.
    typed = values.select(
        "pre_reason",
        "record",
        *(F.expr(f"schema_of_variant({name})").alias(name + _VTYPE) for name in FIELDS),
        *(
            F.expr(f"try_variant_get({name}, '$', '{_target(name)}')").alias(name)
            for name in FIELDS
        ),
    )
    fields = {name: (F.col(name), _json_kind(F.col(name + _VTYPE))) for name in FIELDS}
    return _frame(typed, fields, F.col("pre_reason"), F.col("record"))


def _target(name: str) -> str:
    return "double" if name == "timestamp" else "string"


def _json_kind(vtype: Column) -> Column:
    return (
        F.when(vtype.isNull() | (vtype == "VOID"), F.lit(Kind.NULL.value))
        .when(vtype == "STRING", F.lit(Kind.STRING.value))
        .when(vtype == "BIGINT", F.lit(Kind.INT.value))
        .when((vtype == "DOUBLE") | vtype.startswith("DECIMAL"), F.lit(Kind.NUMBER.value))
        .otherwise(F.lit(Kind.OTHER.value))
    )


# -- CSV ----------------------------------------------------------------------------------
def _csv_options(spark: SparkSession):
    return (
        spark.read.option("header", True)
        .option("multiLine", True)
        .option("escape", '"')
        .option("mode", "PERMISSIVE")
    )


def _read_csv(spark: SparkSession, path: str) -> DataFrame:
    header = _csv_options(spark).csv(path).columns
    check_columns(header, path)
    schema = T.StructType([T.StructField(name, T.StringType()) for name in [*header, CORRUPT]])
    rows = _csv_options(spark).option("columnNameOfCorruptRecord", CORRUPT).schema(schema).csv(path)
    present = set(header)
    fields = {name: _csv_field(name, name in present) for name in FIELDS}
    pre = F.when(F.col(CORRUPT).isNotNull(), F.lit(Reason.FIELD_COUNT.value))
    record = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*header))) if header else F.col(CORRUPT)
    return _frame(rows, fields, pre, record)


def _csv_field(name: str, present: bool) -> tuple[Column, Column]:
    if not present:
        return _missing(name)
    text = F.col(name)
    value = F.when(text != "", text)
    kind = F.lit(Kind.STRING.value)
    if name == "partition":
        as_int = F.expr(f"try_cast(`{name}` AS BIGINT)")
        integral = text.rlike(_anchored(CSV_INT_BODY)) & as_int.isNotNull()
        kind = F.when(integral, F.lit(Kind.INT.value)).otherwise(kind)
    elif name == "timestamp":
        numeric = text.rlike(_anchored(CSV_NUMBER_BODY))
        kind = F.when(numeric, F.lit(Kind.NUMBER.value)).otherwise(kind)
        value = F.when(numeric, F.expr(f"try_cast(`{name}` AS DOUBLE)"))
    return value, _null_kind(F.when(text != "", text), kind)


# -- Parquet ------------------------------------------------------------------------------
def _read_parquet(spark: SparkSession, path: str) -> DataFrame:
    frame = spark.read.parquet(path)
    check_columns(frame.columns, path)
    types = {field.name: field.dataType for field in frame.schema.fields}
    fields = {name: _parquet_field(name, types.get(name)) for name in FIELDS}
    record = F.to_json(F.struct(*frame.columns)) if frame.columns else F.lit("{}")
    return _frame(frame, fields, F.lit(None).cast("string"), record)


def _parquet_field(name: str, dtype: T.DataType | None) -> tuple[Column, Column]:
    if dtype is None:
        return _missing(name)
    kind = _parquet_kind(dtype)
    target = _target(name)
    usable = kind in (Kind.STRING, Kind.INT, Kind.NUMBER)
    value = F.col(name).cast(target) if usable else F.lit(None).cast(target)
    return value, _null_kind(F.col(name), F.lit(kind.value))


def _parquet_kind(dtype: T.DataType) -> Kind:
    if isinstance(dtype, T.StringType):
        return Kind.STRING
    if isinstance(dtype, _INTEGRAL):
        return Kind.INT
    if isinstance(dtype, _FRACTIONAL):
        return Kind.NUMBER
    if isinstance(dtype, T.NullType):
        return Kind.NULL
    return Kind.OTHER


def _missing(name: str) -> tuple[Column, Column]:
    return F.lit(None).cast(_target(name)), F.lit(Kind.NULL.value)


_READERS = {Format.JSONL: _read_jsonl, Format.CSV: _read_csv, Format.PARQUET: _read_parquet}
