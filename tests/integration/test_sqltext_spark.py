"""Plans as SQL text (timeshard.spark.sqltext): the same results as the column API, in a
few py4j calls, for awkward names and nested types."""

from __future__ import annotations

import datetime
import decimal

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from timeshard.spark.sqltext import quoted, renamed, select_exprs, sql_over, summed, type_sql

pytestmark = pytest.mark.spark

TIMES = StructType([StructField("t", TimestampType())])
AWKWARD = ["a.b", "with space", "back`tick", "x AS y", "{brace}", "semi;colon"]


def test_select_exprs_matches_select_expr_for_awkward_names(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1, 2, 3, 4, 5, 6)], AWKWARD)
    exprs = [f"{quoted(n)} + 1 AS {quoted(n + '!')}" for n in AWKWARD]
    got = select_exprs(df, exprs)
    assert got.columns == [n + "!" for n in AWKWARD]
    assert got.collect() == df.selectExpr(*exprs).collect()
    renamed_df = renamed(df, [f"c{i}" for i in range(len(AWKWARD))])
    assert renamed_df.columns == [f"c{i}" for i in range(len(AWKWARD))]
    assert renamed_df.collect()[0][5] == 6
    # A NUL (the separator) in a name: the plain selectExpr, same result.
    nul = select_exprs(df, [f"{quoted('a.b')} AS {quoted('nul' + chr(0) + 'in')}"])
    assert nul.columns == ["nul\x00in"] and nul.collect()[0][0] == 1


def test_select_exprs_takes_two_calls_whatever_the_width(
    spark: SparkSession, calls: list[int]
) -> None:
    wide = spark.range(1).selectExpr(*[f"id + {i} AS c{i}" for i in range(40)])
    exprs = [f"c{i} * 2 AS d{i}" for i in range(40)]
    select_exprs(wide, exprs)  # the splitter is made once per gateway
    calls[0] = 0
    out = select_exprs(wide, exprs)
    assert calls[0] <= 2, calls[0]
    assert out.collect()[0][39] == 78


def test_sql_over_registers_fresh_views_and_drops_them(spark: SparkSession) -> None:
    a = spark.createDataFrame([(1, "x"), (2, "y")], ["k", "{v}"])
    b = spark.createDataFrame([(2, 20)], ["k", "w"])
    before = {t.name for t in spark.catalog.listTables()}
    out = sql_over(
        {"a": a, "b": b},
        lambda v: f"SELECT a.k, a.{quoted('{v}')}, b.w FROM {v['a']} a JOIN {v['b']} b USING (k)",
    )
    assert [tuple(r) for r in out.collect()] == [(2, "y", 20)]
    assert {t.name for t in spark.catalog.listTables()} == before


def test_summed_is_the_group_by_and_takes_no_view(spark: SparkSession, calls: list[int]) -> None:
    rows = [(1, None, 5), (1, None, -2), (1, "a", 7), (2, "a", 1), (2, "a", -1)]
    df = spark.createDataFrame(rows, ["a.b", "with space", "back`tick"])
    keys = [quoted("a.b"), quoted("with space")]
    before = {t.name for t in spark.catalog.listTables()}
    summed(df, keys, quoted("back`tick"))  # the empty Column[] is made once per gateway
    calls[0] = 0
    out = summed(df, keys, quoted("back`tick"))
    assert calls[0] <= 10, calls[0]
    wide = spark.range(1).selectExpr(*[f"id + {i} AS c{i}" for i in range(40)], "1L AS n")
    calls[0] = 0
    summed(wide, [f"c{i}" for i in range(40)], "n")  # as many calls whatever the width
    assert calls[0] <= 10, calls[0]
    assert out.columns == ["a.b", "with space", "back`tick"]
    got = sorted((tuple(r) for r in out.collect()), key=repr)
    assert got == sorted([(1, None, 3), (1, "a", 7), (2, "a", 0)], key=repr)  # a null key too
    assert {t.name for t in spark.catalog.listTables()} == before
    one = summed(df, [quoted("a.b")], quoted("back`tick"))  # one key: the plain API
    assert sorted(tuple(r) for r in one.collect()) == [(1, 10), (2, 0)]


def test_type_sql_parses_back_to_the_same_type(spark: SparkSession) -> None:
    nested = StructType(
        [
            StructField("a.b", LongType()),
            StructField("x`y", ArrayType(DecimalType(20, 3))),
            StructField("m", MapType(StringType(), TIMES)),
        ]
    )
    value = (7, [decimal.Decimal("1.500")], {"k": (datetime.datetime(2026, 1, 2, 3, 4, 5),)})
    df = spark.createDataFrame([(value,)], StructType([StructField("s", nested)]))
    cast = select_exprs(df, [f"CAST(s AS {type_sql(nested)}) AS s"])
    assert cast.schema == df.schema
    assert cast.collect() == df.collect()


def test_jvm_static_and_class_call_in_one_round_trip(spark: SparkSession, calls: list[int]) -> None:
    from timeshard.spark.sqltext import jvm_class, jvm_static

    calls[0] = 0
    empty = jvm_static(spark, "scala.Option", "empty")()
    listed = jvm_class(spark, "java.util.ArrayList")()
    assert calls[0] == 2
    assert empty.isEmpty() and listed.size() == 0


def test_stored_bytes_is_the_checkpoints_own_in_calls_that_do_not_grow_with_the_cache(
    spark: SparkSession, calls: list[int]
) -> None:
    """The size of one checkpoint's blocks, as Spark's scan of every cached RDD gives it,
    in the same number of py4j calls however many other RDDs are cached."""
    from timeshard.spark.checkpoint import local_checkpoint
    from timeshard.storage.upsert_state import stored_bytes

    def scanned(df: object) -> int:
        rdd_id = df._jdf.queryExecution().logical().rdd().id()  # type: ignore[attr-defined]
        jvm_sc = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
        infos = [i for i in jvm_sc.getRDDStorageInfo() if i.id() == rdd_id]
        return sum(int(i.memSize()) + int(i.diskSize()) for i in infos)

    made = [local_checkpoint(spark.range(500 * (i + 1)), eager=True) for i in range(3)]
    counts = []
    for df in made:
        calls[0] = 0
        size = stored_bytes(df)
        counts.append(calls[0])
        assert size == scanned(df) > 0
    more = [local_checkpoint(spark.range(10), eager=True) for _ in range(12)]
    calls[0] = 0
    size = stored_bytes(made[0])
    counts.append(calls[0])
    assert size == scanned(made[0])
    assert len(set(counts)) == 1, counts
    empty = local_checkpoint(spark.range(0), eager=True)
    assert stored_bytes(empty) == 0
    for df in [*made, *more, empty]:
        df._jdf.queryExecution().logical().rdd().unpersist(False)  # type: ignore[attr-defined]
