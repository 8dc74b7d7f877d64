"""Plans written as Spark SQL text, in a few py4j calls whatever their width.

Building a plan column by column costs the driver a py4j round trip per
column object and one per element of every list handed to the JVM (py4j
copies a Python list into a ``java.util.ArrayList`` one ``add`` at a time).
A tick that plans a wide query that way makes hundreds of calls, each 0.3-4
ms while the JVM is busy with tasks. These helpers hand Spark the text
instead:

* :func:`select_exprs`: ``df.selectExpr(...)`` in two calls (the expressions
  travel as one string, split in the JVM into the ``String[]`` of
  ``Dataset.selectExpr``'s varargs overload), and :func:`renamed`, ``toDF``
  likewise (:func:`java_strings` for any other varargs method);
* :func:`summed`: a GROUP BY with one ``sum``, and :func:`grouped`, with any
  aggregates, without a temporary view;
* :func:`empty_frame`: a DataFrame of no rows and a given schema, a local
  relation built in the JVM (PySpark's ``createDataFrame`` of an empty list or
  Arrow table costs 20-50 ms, most of it moving the nothing through Arrow);
* :func:`sql_over`: a whole query (GROUP BY, HAVING, joins) over DataFrames,
  registered as temporary views under fresh names for the analysis and
  dropped right after it (the analyzed plan no longer needs them);
* :func:`type_sql`: a Spark type as SQL text that parses back to it (struct
  field names backquoted);
* :func:`quoted`: a name as an identifier in that text;
* :func:`jvm_static` and :func:`jvm_class`: a JVM class's static method or
  constructor, called in one round trip (``spark._jvm.a.b.C.m(x)`` asks the
  JVM about every name on the way: six round trips before the call for a
  class four packages deep);
* :func:`bigint_where` (and :func:`bigint_within`, an interval): a condition
  on a BIGINT column against a value that changes from tick to tick (a time),
  written so that the classes Spark generates for the plan stay the same from
  tick to tick; :func:`bigint_at_least`, a column raised to such a value, the
  same way.

Only generated text goes into the queries: internal column names, names
quoted with :func:`quoted`, types from :func:`type_sql` and integers. No
user value is spliced in (the view's own SQL, already SQL, aside).

Cost: what remains is Spark's analysis of each new DataFrame, which grows
with the plan: a select_exprs measured ~6 ms, a sql_over ~35 ms (a view's
creation is itself analyzed), in a GROUP BY view's tick. One sql_over pays
where it replaces several transformations.

Runs on the driver; no Spark job.
"""

from __future__ import annotations

import functools
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    StructField,
    StructType,
)

from timeshard.errors import InvalidUsage

#: Separates the expressions of one select_exprs call on their way to the JVM.
_SEP = "\x00"
_splitters: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_empty_columns: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_empty_strings: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
#: The struct column :func:`grouped` packs its aggregates into.
_PACKED = "__grouped"
_lock = threading.Lock()


def quoted(name: str) -> str:
    """``name`` as an identifier in Spark SQL text (backquoted: dots, spaces are not parsed)."""
    return "`" + name.replace("`", "``") + "`"


#: The comparisons :func:`bigint_where` writes.
_COMPARISONS = frozenset({"<", "<=", ">", ">=", "="})


def bigint_where(column: str, op: str, value: int) -> str:
    """A WHERE condition: ``column op value``, for a BIGINT ``column`` and a ``value`` that
    changes from tick to tick (a time bound).

    Spark's code generator writes a BIGINT literal into the Java source of the
    stage that evaluates it, and keys its cache of compiled classes by that
    source: ``_ts >= 6`` and ``_ts >= 7`` compile twice. A tick's time bounds
    made every tick compile its stages anew (a linear view's tick: 4 classes,
    every tick). A struct literal reaches the generated code as a reference
    instead, so the condition compares one-field structs:
    ``_ts IS NOT NULL AND struct(_ts) >= struct(CAST(6 AS BIGINT))``, the
    same source whatever the value. A null ``column`` gives false, where the
    plain comparison gives null: the same rows pass a WHERE.
    """
    if op not in _COMPARISONS:
        raise InvalidUsage(f"bigint_where: unknown comparison {op!r}")
    return f"({column} IS NOT NULL AND struct({column}) {op} struct({_bigint(value)}))"


def _bigint(value: int) -> str:
    """SQL: ``value`` as a BIGINT literal; InvalidUsage naming it if it is no int64 (the
    cast would give null, or fail, instead of the bound)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InvalidUsage(f"{value!r} is no BIGINT (a 64-bit integer)")
    if not -(2**63) <= int(value) < 2**63:
        raise InvalidUsage(f"{value!r} is no BIGINT (a 64-bit integer)")
    return f"CAST({int(value)} AS BIGINT)"


def bigint_within(column: str, lower: int, upper: int) -> str:
    """A WHERE condition: ``lower <= column < upper`` (:func:`bigint_where`'s form)."""
    return f"{bigint_where(column, '>=', lower)} AND {bigint_where(column, '<', upper)}"


def bigint_at_least(column: str, value: int) -> str:
    """An expression: ``greatest(column, value)``, for a BIGINT ``column`` and a ``value`` that
    changes from tick to tick (a time that earlier times fold to).

    A projected literal is spelled out in the stage's generated Java (and
    constant folding makes any expression of literals one), so it is compared
    inside one-field structs, as :func:`bigint_where` does:
    ``greatest(named_struct('t', _ts), named_struct('t', CAST(6 AS BIGINT))).t``.
    A null ``column`` gives ``value``, as ``greatest`` does.
    """
    bound = f"named_struct('t', {_bigint(value)})"
    return f"greatest(named_struct('t', {column}), {bound}).t"


def _per_gateway(
    spark: SparkSession, cache: weakref.WeakKeyDictionary[Any, Any], make: Callable[[Any], Any]
) -> Any:
    """``make(gateway)`` for the session's py4j gateway, made once and kept in ``cache``."""
    gateway = spark.sparkContext._gateway
    assert gateway is not None, "a classic SparkSession has a py4j gateway"
    with _lock:
        made = cache.get(gateway)
        if made is None:
            made = cache[gateway] = make(gateway)
        return made


def _splitter(spark: SparkSession) -> Any:
    """The JVM's ``Pattern`` splitting on :data:`_SEP`, one per py4j gateway."""
    return _per_gateway(spark, _splitters, lambda g: g.jvm.java.util.regex.Pattern.compile(_SEP))


def jvm_class(spark: SparkSession, fqn: str) -> Any:
    """The JVM class ``fqn`` (its constructor, called, is one py4j round trip), with no
    round trip to look it up (``fqn``: a class this code names, never user text)."""
    from py4j.java_gateway import JavaClass

    gateway = spark.sparkContext._gateway
    assert gateway is not None, "a classic SparkSession has a py4j gateway"
    return JavaClass(fqn, gateway._gateway_client)


def jvm_static(spark: SparkSession, fqn: str, method: str) -> Any:
    """The static method ``method`` of the JVM class ``fqn`` (a call is one py4j round
    trip), with no round trip to look it up."""
    from py4j import protocol
    from py4j.java_gateway import JavaMember

    gateway = spark.sparkContext._gateway
    assert gateway is not None, "a classic SparkSession has a py4j gateway"
    return JavaMember(method, None, protocol.STATIC_PREFIX + fqn, gateway._gateway_client)


def java_strings(spark: SparkSession, items: Sequence[str]) -> Any | None:
    """``items`` as a JVM ``String[]`` in one py4j call (None if empty, or one holds a NUL)."""
    if not items or any(_SEP in i for i in items):
        return None
    return _splitter(spark).split(_SEP.join(items), -1)


def select_exprs(df: DataFrame, exprs: Sequence[str]) -> DataFrame:
    """``df.selectExpr(*exprs)`` in two py4j calls (see the module doc)."""
    strings = java_strings(df.sparkSession, exprs)
    if strings is None:  # an empty list, or a NUL in a quoted name
        return df.selectExpr(*exprs)
    return DataFrame(df._jdf.selectExpr(strings), df.sparkSession)


def summed(df: DataFrame, keys: Sequence[str], column: str) -> DataFrame:
    """``SELECT keys, sum(column) AS column FROM df GROUP BY keys``: the Dataset API in
    a few py4j calls, no temporary view (``keys``, ``column``: names as :func:`quoted`
    gives them; at least one key)."""
    strings = java_strings(df.sparkSession, keys[1:])
    if strings is None:  # one key (or a NUL in a quoted name): the plain API
        return df.groupBy(*keys).agg(F.expr(f"sum({column}) AS {column}"))
    jvm = df.sparkSession._jvm
    assert jvm is not None, "a classic SparkSession has a py4j gateway"
    total = jvm.org.apache.spark.sql.functions.expr(f"sum({column}) AS {column}")
    grouped = df._jdf.groupBy(keys[0], strings).agg(total, _no_columns(df.sparkSession))
    return DataFrame(grouped, df.sparkSession)


def grouped(df: DataFrame, keys: Sequence[str], aggregates: Sequence[str]) -> DataFrame:
    """``SELECT keys, aggregates FROM df GROUP BY keys`` without a temporary view, in six
    py4j calls whatever the number of aggregates (each ``expression AS name``, names as
    :func:`quoted` gives them; at least one key and one aggregate).

    The aggregates travel as one struct, unpacked by a projection above the
    aggregation: one ``Column`` for ``agg``'s varargs, not an array built
    element by element.
    """
    strings = java_strings(df.sparkSession, keys[1:]) if keys[1:] else None
    if (keys[1:] and strings is None) or not aggregates:
        return df.groupBy(*keys).agg(*(F.expr(a) for a in aggregates))
    rest = strings if strings is not None else _no_strings(df.sparkSession)
    spark = df.sparkSession
    packed = jvm_static(spark, "org.apache.spark.sql.functions", "expr")(
        f"struct({', '.join(aggregates)}) AS {_PACKED}"
    )
    jgrouped = df._jdf.groupBy(keys[0], rest).agg(packed, _no_columns(spark))
    return select_exprs(DataFrame(jgrouped, spark), [*keys, f"{_PACKED}.*"])


def _no_strings(spark: SparkSession) -> Any:
    """An empty JVM ``String[]`` (the varargs tail of ``groupBy``), one per py4j gateway."""
    return _per_gateway(spark, _empty_strings, lambda g: g.new_array(g.jvm.java.lang.String, 0))


def _no_columns(spark: SparkSession) -> Any:
    """An empty JVM ``Column[]`` (the varargs tail of ``agg``), one per py4j gateway."""
    return _per_gateway(
        spark, _empty_columns, lambda g: g.new_array(g.jvm.org.apache.spark.sql.Column, 0)
    )


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """A DataFrame of no rows of ``schema`` (its types and nullability exactly): a local
    relation, on which actions run no Spark job. Three py4j calls, no Arrow batch."""
    jspark = spark._jsparkSession
    rows = jvm_class(spark, "java.util.ArrayList")()
    return DataFrame(jspark.createDataFrame(rows, jspark.parseDataType(schema.json())), spark)


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    """The rows of ``frames`` (at least one), by position: ``UNION ALL``. Spark keeps their
    partitioning when they all share it (``spark.sql.unionOutputPartitioning``)."""
    return functools.reduce(lambda a, b: a.union(b), frames)


def renamed(df: DataFrame, names: Sequence[str]) -> DataFrame:
    """``df.toDF(*names)`` (renamed by position) in two py4j calls."""
    strings = java_strings(df.sparkSession, names)
    if strings is None:
        return df.toDF(*names)
    return DataFrame(df._jdf.toDF(strings), df.sparkSession)


def sql_over(
    frames: Mapping[str, DataFrame], build: Callable[[Mapping[str, str]], str]
) -> DataFrame:
    """The query ``build(names)`` over ``frames``, each a temporary view named ``names[role]``.

    The names are fresh per call, so concurrent callers on one session never
    see each other's views; the views are dropped once the query is analyzed.
    """
    assert frames, "sql_over needs at least one DataFrame"
    spark = next(iter(frames.values())).sparkSession
    tag = uuid.uuid4().hex
    names = {role: f"__timeshard_{role}_{tag}" for role in frames}
    try:
        for role, df in frames.items():
            df.createOrReplaceTempView(names[role])
        return spark.sql(build(names))
    finally:
        catalog = spark._jsparkSession.catalog()
        for name in names.values():
            catalog.dropTempView(name)


def typed_null(name: str, data_type: DataType) -> str:
    """SQL text of a null of ``data_type`` named ``name`` (a select list item)."""
    return f"CAST(NULL AS {type_sql(data_type)}) AS {quoted(name)}"


def nullable(data_type: DataType) -> DataType:
    """``data_type`` with every struct field, array element and map value nullable (the
    type a cast may go to from any type of its shape)."""
    if isinstance(data_type, StructType):
        fields = [StructField(f.name, nullable(f.dataType), True, f.metadata) for f in data_type]
        return StructType(fields)
    if isinstance(data_type, ArrayType):
        return ArrayType(nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(nullable(data_type.keyType), nullable(data_type.valueType), True)
    return data_type


def type_sql(data_type: DataType) -> str:
    """``data_type`` as Spark SQL type text (``CAST(x AS <it>)`` gives that type back)."""
    if isinstance(data_type, StructType):
        fields = [f"{quoted(f.name)}: {type_sql(f.dataType)}" for f in data_type.fields]
        return f"STRUCT<{', '.join(fields)}>"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{type_sql(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{type_sql(data_type.keyType)}, {type_sql(data_type.valueType)}>"
    if isinstance(data_type, DecimalType):
        return f"DECIMAL({data_type.precision}, {data_type.scale})"
    return data_type.simpleString()


__all__ = [
    "bigint_at_least",
    "bigint_where",
    "bigint_within",
    "empty_frame",
    "grouped",
    "java_strings",
    "jvm_class",
    "jvm_static",
    "nullable",
    "quoted",
    "renamed",
    "select_exprs",
    "sql_over",
    "summed",
    "type_sql",
    "typed_null",
    "union_all",
]
