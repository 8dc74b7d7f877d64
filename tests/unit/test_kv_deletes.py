"""KeyValueGenerator ``deletes``: validation, and the SQL it hands Spark (no Spark needed)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from timeshard.errors import InvalidUsage
from timeshard.storage.sources import DELETE_SCALE, KeyValueGenerator


class RecordingSpark:
    """Stands in for a SparkSession: keeps the SQL it is given."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def sql(self, query: str) -> Any:
        self.queries.append(query)
        return query


def sql_of(gen: KeyValueGenerator, lo: int = 0, hi: int = 100) -> str:
    spark = RecordingSpark()
    gen.read(spark, dict.fromkeys(gen.partition_names, lo), dict.fromkeys(gen.partition_names, hi))
    (query,) = spark.queries
    return query


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf, "0.1", None, True])
def test_deletes_outside_a_fraction_is_invalid_usage_naming_it(bad: Any) -> None:
    with pytest.raises(InvalidUsage, match="deletes") as e:
        KeyValueGenerator(deletes=bad)
    assert repr(bad) in str(e.value)


@pytest.mark.parametrize("ok", [0, 0.0, 0.1, 1, 1.0])
def test_deletes_in_the_unit_interval_is_accepted(ok: float) -> None:
    assert KeyValueGenerator(deletes=ok).deletes == ok


def test_no_deletes_reads_exactly_as_before() -> None:
    # With deletes=0.0 the query must not change at all: the same commands as before.
    plain = KeyValueGenerator(keys=50, rate=7, seed=3)
    zero = KeyValueGenerator(keys=50, rate=7, seed=3, deletes=0.0)
    assert sql_of(plain) == sql_of(zero)
    assert "NULL" not in sql_of(zero)


def test_deletes_null_the_value_only_after_the_snapshot_by_a_seeded_hash() -> None:
    query = sql_of(KeyValueGenerator(keys=50, rate=7, seed=3, deletes=0.25))
    assert "CAST(NULL AS STRING)" in query
    assert f"{DELETE_SCALE}) < {DELETE_SCALE // 4}" in query
    # the condition starts after the snapshot: id >= the keys a partition owns
    assert "id >= ((50 - pidx - 1) DIV 2 + 1)" in query
    assert "xxhash64(3, 'delete'" in query


def test_deletes_change_only_the_value_column() -> None:
    plain = sql_of(KeyValueGenerator(keys=50, rate=7, seed=3))
    deleting = sql_of(KeyValueGenerator(keys=50, rate=7, seed=3, deletes=0.5))
    key_part = plain.split(" AS key,")[0]
    assert deleting.startswith(key_part)
    assert plain != deleting
