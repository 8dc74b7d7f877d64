"""An export is not named like a source, a view or a shard of the location.

Health and status are kept by object name: an export named like the source
it reads reported ``running`` over the source's ``stalled``.
"""

from __future__ import annotations

import pytest

from timeshard.errors import InvalidUsage
from timeshard.spec import ExportSpec, RunSpec, SourceSpec, ViewSpec, check_spec

KV = SourceSpec(name="kv", kind="key_value", envelope="upsert", key_columns=["key"])
AUCTION = SourceSpec(name="a", kind="auction")
VIEW = ViewSpec(name="v", inputs={"k": "kv"}, sql="SELECT count(*) AS n FROM k")


def export(name: str) -> ExportSpec:
    return ExportSpec(
        name=name, kind="delta", input="kv", key_columns=["key"], options={"table_uri": "/tmp/x"}
    )


@pytest.mark.parametrize(
    ("name", "owner"),
    [("kv", "source 'kv'"), ("v", "view 'v'"), ("a", "source 'a'"), ("a.bids", "source 'a'")],
)
def test_an_export_named_like_an_object_of_the_file_is_refused(name: str, owner: str) -> None:
    spec = RunSpec(source=[KV, AUCTION], view=[VIEW], export=[export(name)])
    with pytest.raises(InvalidUsage, match=rf"export '{name}' is named like {owner}"):
        check_spec(spec, existing=[])


def test_an_export_named_like_a_shard_of_the_location_is_refused() -> None:
    spec = RunSpec(export=[export("old")])
    with pytest.raises(InvalidUsage, match=r"export 'old' is named like the shard 'old'"):
        check_spec(spec, existing=["kv", "old"])
    check_spec(RunSpec(export=[export("new")]), existing=["kv", "old"])
