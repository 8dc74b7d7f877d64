"""KeyValueGenerator ``deletes`` on Spark: which commands are deletes, and UPSERT of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Ingestion
from timeshard.storage.sources import KeyValueGenerator

pytestmark = pytest.mark.spark


def rows(spark: Any, gen: KeyValueGenerator, hi: int) -> list[dict[str, Any]]:
    df = gen.read(
        spark, dict.fromkeys(gen.partition_names, 0), dict.fromkeys(gen.partition_names, hi)
    )
    return sorted((r.asDict() for r in df.collect()), key=lambda r: (r["_partition"], r["_offset"]))


def test_deletes_keep_keys_and_offsets_and_null_a_seeded_fraction(spark: Any) -> None:
    keys, hi = 100, 2100  # per partition: 50 snapshot records, then 2050 commands
    plain = rows(spark, KeyValueGenerator(keys=keys, partitions=2, seed=5), hi)
    gen = KeyValueGenerator(keys=keys, partitions=2, seed=5, deletes=0.3)
    deleting = rows(spark, gen, hi)
    assert deleting == rows(spark, gen, hi)  # deterministic
    assert len(plain) == len(deleting) == 2 * hi
    deleted = 0
    for p, d in zip(plain, deleting, strict=True):
        assert (p["_partition"], p["_offset"], p["key"]) == (
            d["_partition"],
            d["_offset"],
            d["key"],
        )
        if d["value"] is None:
            assert p["_offset"] >= keys // 2, "a snapshot record is never a delete"
            deleted += 1
        else:
            assert d["value"] == p["value"]
    assert 0.25 < deleted / (2 * (hi - keys // 2)) < 0.35
    other_seed = rows(spark, KeyValueGenerator(keys=keys, partitions=2, seed=6, deletes=0.3), hi)
    assert [r["value"] is None for r in other_seed] != [r["value"] is None for r in deleting]


def test_upsert_of_deletes_equals_last_value_per_key(spark: Any, tmp_path: Path) -> None:
    gen = KeyValueGenerator(keys=30, value_size=8, partitions=2, rate=40, seed=2, deletes=0.4)
    client = PersistClient(Location.embedded(tmp_path))
    ing = Ingestion(spark, client, gen, envelope="upsert", key_columns=["key"])
    for _ in range(4):
        ing.step()
    bound = ing.remap.frontier_at((ing.remap.upper.time or 1) - 1)
    reader = client.open_leased_reader("kv")
    upper = (reader.fetch_recent_upper().time or 1) - 1
    got = sorted((r["key"], r["value"], r["_diff"]) for r in reader.snapshot(upper).to_pylist())
    # The reference: the last command per key in offset order (one partition per key).
    records = gen.read(spark, dict.fromkeys(gen.partition_names, 0), bound).collect()
    latest: dict[int, str | None] = {}
    for r in sorted(records, key=lambda r: r["_offset"]):
        latest[r["key"]] = r["value"]
    expected = sorted((k, v, 1) for k, v in latest.items() if v is not None)
    assert any(v is None for v in latest.values()), "the run must contain a live delete"
    assert got == expected
