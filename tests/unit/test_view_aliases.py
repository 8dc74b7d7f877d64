"""A SQL view's input aliases are names Spark SQL takes for a temp view."""

from __future__ import annotations

import pytest

from timeshard.compute import ViewDefinition
from timeshard.errors import InvalidUsage
from timeshard.spec import RunSpec, ViewSpec, check_spec


@pytest.mark.parametrize("alias", ["123", "a.b", "a b", "", "a`b", "é"])
def test_an_alias_spark_would_refuse_is_invalid_usage_when_declared(alias: str) -> None:
    with pytest.raises(InvalidUsage, match="is no name Spark SQL takes"):
        ViewDefinition("v", {alias: "s"}, "SELECT 1 AS x")
    spec = RunSpec(view=[ViewSpec(name="v", inputs={alias: "s"}, sql="SELECT 1 AS x")])
    with pytest.raises(InvalidUsage, match="is no name Spark SQL takes"):
        check_spec(spec, existing=["s"])  # before Spark starts


@pytest.mark.parametrize("alias", ["a", "_x", "in_a", "A2"])
def test_identifiers_are_aliases(alias: str) -> None:
    ViewDefinition("v", {alias: "s"}, "SELECT 1 AS x")
