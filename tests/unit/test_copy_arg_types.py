"""COPY's header and not_null arguments are checked for their types: a value of another
type is InvalidUsage naming it, never read by its truth or iterated as it happens to be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.copy_from import plan_copy


@pytest.fixture
def setup(tmp_path: Path) -> tuple[PersistClient, str]:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("orders", pa.schema([("k", pa.string()), ("v", pa.int64())]))
    writer.append([(("a", 1), 0, 1)], 0, 3)
    writer.expire()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("x,1\n")
    return client, str(tmp_path / "in")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"header": "false"}, "header must be True or False, got 'false'"),
        ({"header": "no"}, "header must be True or False, got 'no'"),
        ({"header": 0}, "header must be True or False, got 0"),
        ({"header": 1}, "header must be True or False, got 1"),
        ({"not_null": None}, "not_null must be a list of column names, got None"),
        ({"not_null": "k"}, "not_null must be a list of column names, got 'k'"),
        ({"not_null": ["k", 1]}, "not_null must be a list of column names, got ['k', 1]"),
        ({"not_null": 3}, "not_null must be a list of column names, got 3"),
    ],
)
def test_a_header_or_not_null_of_another_type_is_refused(
    setup: tuple[PersistClient, str], kwargs: dict[str, Any], message: str
) -> None:
    client, path = setup
    with pytest.raises(InvalidUsage) as e:
        plan_copy(client, path, "orders", format="csv", **kwargs)
    assert message in str(e.value)


def test_header_and_not_null_of_their_types_are_taken(setup: tuple[PersistClient, str]) -> None:
    client, path = setup
    plan = plan_copy(client, path, "orders", format="csv", header=False, not_null=["k", "v"])
    assert plan.header is False and plan.not_null == ("k", "v")
    plan = plan_copy(client, path, "orders", format="csv", not_null=(c for c in ["v"]))
    assert plan.header is True and plan.not_null == ("v",)
