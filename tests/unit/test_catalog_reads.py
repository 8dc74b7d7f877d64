"""Building an ingestion or a pipeline reads the catalog once for its checks.

The checks (a source declared again, the owners of the shards it writes, a
PostgreSQL source's recorded tables) all look at one read of the catalog, which a
pipeline reads once and passes to each ingestion; the record of a source reads it
once more, for its compare-and-set. Before, an ingestion read it for each check
and a pipeline again for each source. No Spark: the first ticks fail without it,
and are failures of their sources.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import timeshard.catalog as catalog
from timeshard.catalog import read_catalog
from timeshard.controller import Pipeline
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spec import RunSpec, SourceSpec
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import CounterGenerator


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    counted: list[int] = []
    read = catalog._catalog_read

    def counting(client: PersistClient) -> Any:
        counted.append(1)
        return read(client)

    monkeypatch.setattr(catalog, "_catalog_read", counting)
    yield counted


def test_an_ingestion_reads_the_catalog_once_and_once_to_record(
    client: PersistClient, reads: list[int]
) -> None:
    Ingestion(None, client, CounterGenerator(name="c")).close()
    assert len(reads) == 2
    reads.clear()
    Ingestion(None, client, CounterGenerator(name="c"), catalog=read_catalog(client)).close()
    assert len(reads) == 2  # the one given, and the record's (nothing changed: no write)


def test_a_pipeline_reads_the_catalog_once_and_once_per_record(
    client: PersistClient, reads: list[int]
) -> None:
    spec = RunSpec(source=[SourceSpec(name=n, kind="counter") for n in ("a", "b", "c")])
    Pipeline(None, client, spec).close()
    assert len(reads) == 1 + 3


def test_sources_of_one_pipeline_that_write_one_shard_are_still_refused(
    client: PersistClient,
) -> None:
    """Without check_spec: the pipeline checks its sources against each other."""
    spec = RunSpec(
        source=[
            SourceSpec(name="a", kind="auction"),
            SourceSpec(name="a.bids", kind="counter"),
        ]
    )
    with pytest.raises(InvalidUsage, match=r"'a\.bids'"):
        Pipeline(None, client, spec)
