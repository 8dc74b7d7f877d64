"""A DataFrame conformed to the part schema of a shard (driver, no Spark job).

:func:`conform_df` selects and casts a DataFrame's columns to the shard's
data columns plus ``_ts``, ``_diff`` and ``_err`` (a null ``_err`` where it has
none), and raises InvalidUsage naming the columns or types of a DataFrame that
does not fit (:mod:`timeshard.spark.parts`, invariant 2). Types are taken as
they are or widened exactly (:func:`_widens`). ``write_parts`` selects the
same casts (:func:`_conform_casts`) under positional names; the tasks then
conform each batch with pyarrow
(:class:`~timeshard.spark.part_writer.PartWriter`).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NullType,
    ShortType,
    StringType,
)

from timeshard.errors import InvalidUsage
from timeshard.persist._internal.parts import ERR, updates_schema
from timeshard.spark.session import arrow_to_spark_schema
from timeshard.spark.sqltext import quoted, select_exprs, type_sql

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)

_INTEGRAL_DIGITS: dict[type[DataType], int] = {
    ByteType: 3,
    ShortType: 5,
    IntegerType: 10,
    LongType: 19,
}


def conform_df(df: DataFrame, data_schema: pa.Schema) -> DataFrame:
    """``df`` selected and cast to the part schema (driver, no Spark job).

    Adds a null ``_err`` if ``df`` has none. Raises InvalidUsage naming the
    columns or types when ``df`` does not fit ``data_schema``.
    """
    return select_exprs(df, [f"{e} AS {quoted(n)}" for e, n in _conform_casts(df, data_schema)])


def _conform_casts(df: DataFrame, data_schema: pa.Schema) -> list[tuple[str, str]]:
    """Per part column of :func:`conform_df`: its expression (a cast of ``df``'s), its name."""
    target = arrow_to_spark_schema(updates_schema(data_schema))
    names, expected = list(df.columns), target.fieldNames()
    if ERR not in names:
        names.append(ERR)
    missing = [n for n in expected if n not in names]
    unexpected = [n for n in names if n not in expected]
    if missing or unexpected or len(set(names)) != len(names):
        raise InvalidUsage(
            f"schema mismatch: DataFrame has columns {names}, the shard expects {expected} "
            f"(missing {missing}, unexpected {unexpected})"
        )
    actual = {f.name: f.dataType for f in df.schema.fields}
    actual.setdefault(ERR, StringType())
    wrong = [
        f"column {f.name!r} is {actual[f.name].simpleString()}, "
        f"the shard has {f.dataType.simpleString()}"
        for f in target.fields
        if not _widens(actual[f.name], f.dataType)
    ]
    if wrong:
        raise InvalidUsage("schema mismatch: " + "; ".join(wrong))
    present = set(df.columns)
    source = {f.name: quoted(f.name) if f.name in present else "NULL" for f in target.fields}
    return [(f"CAST({source[f.name]} AS {type_sql(f.dataType)})", f.name) for f in target.fields]


def _widens(source: DataType, target: DataType) -> bool:
    """Whether Spark widens ``source`` to ``target`` exactly (doubles: up to 2**53)."""
    if source.simpleString() == target.simpleString() or isinstance(source, NullType):
        return True
    if not isinstance(source, _INTEGRAL):
        return isinstance(source, FloatType) and isinstance(target, DoubleType)
    digits = _INTEGRAL_DIGITS[type(source)]
    if isinstance(target, DecimalType):
        return target.precision - target.scale >= digits
    if isinstance(target, _INTEGRAL):
        return _INTEGRAL_DIGITS[type(target)] >= digits
    return isinstance(target, DoubleType)


__all__ = ["conform_df"]
