"""A declaration never writes a shard another object of the location writes.

A view named like a source's shard would rewrite the source's rows with its
query's (a source's 80 rows became the view's 8); a source named like a view
would mix its records into the view's. The catalog says who writes what:
:func:`~timeshard.spec.check_spec` (given the catalog), the pipeline and the
ingestion refuse another writer, naming the shard and its owner. The
location's own names and a source's remap name are nobody's to take.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.catalog import read_catalog
from timeshard.controller import Pipeline
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spec import (
    SYSTEM_NAMES,
    RunSpec,
    SourceSpec,
    ViewSpec,
    check_new_shard_owner,
    check_spec,
    shard_owners,
)
from timeshard.storage.health import STATUS_SHARD
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import CounterGenerator, KeyValueGenerator


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    Ingestion(None, client, CounterGenerator(name="c")).close()  # records source 'c'
    return client


def view(name: str, reads: str = "c") -> ViewSpec:
    return ViewSpec(name=name, inputs={"x": reads}, sql="SELECT count(*) AS n FROM x")


def test_a_view_over_a_source_shard_is_refused(client: PersistClient) -> None:
    spec = RunSpec(source=[SourceSpec(name="kv", kind="key_value")], view=[view("c", "kv")])
    catalog = read_catalog(client)
    with pytest.raises(InvalidUsage, match=r"view 'c' would write the shard 'c'.*source 'c'"):
        check_spec(spec, existing=client.list_shards(), catalog=catalog)
    with pytest.raises(InvalidUsage, match=r"view 'c' would write the shard 'c'.*source 'c'"):
        Pipeline(None, client, spec)
    assert "kv" not in client.list_shards()  # refused before any source wrote


def test_a_source_over_another_object_shard_is_refused(client: PersistClient) -> None:
    with pytest.raises(InvalidUsage, match=r"source 'c.remap' would write .*'c.remap'.*remap"):
        Ingestion(None, client, KeyValueGenerator(name="c.remap"))
    owners = {"v": "view 'v'"}
    with pytest.raises(InvalidUsage, match=r"source 'v' would write the shard 'v'.*view 'v'"):
        check_new_shard_owner("v", "source 'v'", owners)
    check_new_shard_owner("v", "view 'v'", owners)  # the view itself, redefined


def test_the_same_source_declared_again_is_its_own_owner(client: PersistClient) -> None:
    assert shard_owners(read_catalog(client)) == {
        "c": "source 'c'",
        "c.remap": "source 'c' (its remap)",
    }
    Ingestion(None, client, CounterGenerator(name="c")).close()
    check_spec(RunSpec(source=[SourceSpec(name="c", kind="counter")]), [], read_catalog(client))


@pytest.mark.parametrize("name", [*SYSTEM_NAMES, "c.remap", "other.remap"])
def test_system_and_remap_names_are_no_view_names(name: str) -> None:
    spec = RunSpec(source=[SourceSpec(name="c", kind="counter")], view=[view(name)])
    with pytest.raises(InvalidUsage, match=rf"view '{name}' would write"):
        check_spec(spec, existing=[])


def test_system_names_are_the_location_s_own() -> None:
    from timeshard.catalog import CATALOG_SHARD

    assert CATALOG_SHARD in SYSTEM_NAMES and STATUS_SHARD in SYSTEM_NAMES
    with pytest.raises(InvalidUsage, match="timeshard_objects"):
        check_spec(RunSpec(source=[SourceSpec(name="timeshard_objects", kind="counter")]), [])


def test_timeshard_run_refuses_another_objects_shard_before_spark_starts(
    tmp_path: Path, client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    import timeshard.spark
    from timeshard.cli.main import app

    def no_spark(**_: object) -> None:
        raise AssertionError("Spark started")

    monkeypatch.setattr(timeshard.spark, "spark_session", no_spark)
    spec = tmp_path / "run.toml"
    spec.write_text(
        f'[location]\ndir = "{tmp_path / "loc"}"\n\n'
        '[[source]]\nname = "kv"\nkind = "key_value"\n\n'
        '[[view]]\nname = "c"\ninputs = { x = "kv" }\nsql = "SELECT count(*) AS n FROM x"\n'
    )
    result = CliRunner().invoke(app, ["run", str(spec), "--seconds", "1"])
    assert isinstance(result.exception, InvalidUsage), result.exception  # not "Spark started"
    assert "view 'c' would write the shard 'c'" in str(result.exception)


def test_an_output_named_like_the_source_s_own_remap_is_refused(tmp_path: Path) -> None:
    """A source of several outputs writes ``<name>.<table>``: a table named ``remap`` (a
    PostgreSQL ``FOR TABLE remap``) would write the source's remap shard."""
    import pyarrow as pa

    class TwoTables(CounterGenerator):
        def outputs(self) -> dict[str, pa.Schema]:
            return {"remap": pa.schema([("x", pa.int64())]), "a": pa.schema([("x", pa.int64())])}

    client = PersistClient(Location.embedded(tmp_path / "loc2"))
    with pytest.raises(InvalidUsage, match=r"'pg.remap', which source 'pg' \(its remap\)"):
        Ingestion(None, client, TwoTables(name="pg"))
    assert client.list_shards() == []
