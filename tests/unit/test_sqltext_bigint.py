"""The tick-varying BIGINT bounds of sqltext take int64 values only."""

from __future__ import annotations

import pytest

from timeshard.errors import InvalidUsage
from timeshard.spark.sqltext import bigint_at_least, bigint_where, bigint_within


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 1.5, True, "3"])
def test_a_bound_that_is_no_bigint_is_invalid_usage_naming_it(value: object) -> None:
    with pytest.raises(InvalidUsage, match="is no BIGINT"):
        bigint_where("_ts", ">=", value)  # type: ignore[arg-type]
    with pytest.raises(InvalidUsage, match="is no BIGINT"):
        bigint_at_least("_ts", value)  # type: ignore[arg-type]


def test_the_bounds_of_int64_are_bigints() -> None:
    assert "CAST(9223372036854775807 AS BIGINT)" in bigint_within("_ts", -(2**63), 2**63 - 1)
    assert "CAST(-9223372036854775808 AS BIGINT)" in bigint_where("_ts", "<", -(2**63))


def test_a_numpy_integer_is_a_bigint() -> None:
    import numpy as np

    assert "CAST(7 AS BIGINT)" in bigint_where("_ts", ">=", np.int64(7))  # type: ignore[arg-type]
