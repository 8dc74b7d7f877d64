"""A source declared again with options that change what its offsets mean is refused.

Its remap shard binds offsets of the recorded options: resumed under other
ones (another file, another partitioning of a generator, another topic), it
would read on from offsets that mean other records, and lose or repeat them.
Options that do not change the meaning of an offset (a generator's rate) may
change. No Spark: the bindings are minted through the remap directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from timeshard.catalog import check_redeclared, stored_entry
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.file_source import FileSource
from timeshard.storage.ingest import Ingestion
from timeshard.storage.reclock import Remap
from timeshard.storage.sources import CounterGenerator, KeyValueGenerator


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


def declare(client: PersistClient, source: Any, *, bind: bool = True) -> None:
    """Build the ingestion of ``source`` and, with ``bind``, mint one binding."""
    Ingestion(None, client, source).close()
    if bind:
        remap = Remap(client, f"{source.name}.remap")
        remap.mint(1, dict.fromkeys(source.upper() or {"0": 0}, 5))
        remap.close()


def test_a_generator_with_other_partitions_is_refused(client: PersistClient) -> None:
    declare(client, KeyValueGenerator(name="x", keys=10, partitions=2))
    with pytest.raises(InvalidUsage, match=r"'x'.*partitions 2.*partitions 1"):
        Ingestion(None, client, KeyValueGenerator(name="x", keys=10, partitions=1))
    assert stored_entry(client, "x", "source").definition["options"]["partitions"] == 2  # type: ignore[union-attr]


def test_a_source_of_another_kind_is_refused(client: PersistClient) -> None:
    declare(client, KeyValueGenerator(name="x", keys=10))
    with pytest.raises(InvalidUsage, match=r"kind 'key_value'.*kind 'counter'"):
        check_redeclared(client, "x", CounterGenerator(name="x"))


def test_a_file_source_with_another_path_is_refused(client: PersistClient, tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    declare(client, FileSource("f", tmp_path / "a", "text"))
    with pytest.raises(InvalidUsage, match=r"'f'.*path '.*/a'.*path '.*/b'"):
        Ingestion(None, client, FileSource("f", tmp_path / "b", "text"))


def test_options_that_keep_the_offsets_meaning_may_change(client: PersistClient) -> None:
    declare(client, KeyValueGenerator(name="x", keys=10, rate=5))
    Ingestion(None, client, KeyValueGenerator(name="x", keys=10, rate=50)).close()
    declare(client, CounterGenerator(name="c", rate=1))
    check_redeclared(client, "c", CounterGenerator(name="c", rate=7))


def test_a_source_without_bindings_may_be_declared_anew(client: PersistClient) -> None:
    declare(client, KeyValueGenerator(name="x", keys=10, partitions=2), bind=False)
    Ingestion(None, client, KeyValueGenerator(name="x", keys=10, partitions=1)).close()
