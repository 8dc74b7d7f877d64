"""``timeshard verify`` without Spark: shard invariants, the catalog, broken states found."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from timeshard.catalog import (
    CATALOG_SHARD,
    Catalog,
    CatalogEntry,
    read_catalog,
    record_source,
    record_view,
    source_entries,
)
from timeshard.cli.main import app
from timeshard.compute.view import ViewDefinition
from timeshard.errors import InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus, VersionedData
from timeshard.persist import PersistClient, ShardState
from timeshard.persist._internal.state import decode_state, encode_state
from timeshard.progress import Description, Frontier
from timeshard.storage.file_source import DEFAULT_MAX_LINE_BYTES, FileSource
from timeshard.storage.health import Health
from timeshard.storage.reclock import REMAP_SCHEMA, Remap
from timeshard.storage.sources import CounterGenerator, KeyValueGenerator
from timeshard.storage.upsert import FeedbackUpsert, UpsertCommand
from timeshard.verify import Finding, VerifyReport, check_batches, sample_times, verify_location

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
runner = CliRunner()


@pytest.fixture
def client() -> PersistClient:
    return PersistClient(Location(MemoryBlob(), MemoryConsensus()))


def write_orders(client: PersistClient, shard: str = "orders") -> None:
    """Three batches: [0, 2) with two rows, [2, 3) retracting one, [3, 5) adding one."""
    writer = client.open_writer(shard, SCHEMA)
    writer.append([(("a", 1), 0, 1), (("b", 2), 1, 1)], 0, 2)
    writer.append([(("a", 1), 2, -1)], 2, 3)
    writer.append([(("c", 3), 4, 1)], 3, 5)
    writer.expire()


def tamper(client: PersistClient, shard: str, change: object) -> None:
    """Replace the head state of ``shard`` by ``change(state)`` behind persist's back."""
    consensus = client.location.consensus
    head = consensus.head(shard)
    assert head is not None
    state = decode_state(shard, head.seqno, head.data)
    new = replace(change(state), seqno=head.seqno + 1)  # type: ignore[operator]
    consensus.compare_and_set(shard, head.seqno, VersionedData(new.seqno, encode_state(new)))


def only(report: VerifyReport) -> Finding:
    assert len(report.findings) == 1, [f.describe() for f in report.findings]
    return report.findings[0]


def test_clean_location_verifies(client: PersistClient) -> None:
    write_orders(client)
    write_orders(client, "v")
    Health(client, clock=lambda: 7).report("orders", "running")
    remap = Remap(client, "src.remap")
    remap.mint(3, {"0": 5})
    remap.mint(6, {"0": 9, "1": 2})
    record_view(client, ViewDefinition("v", {"o": "orders"}, "SELECT * FROM o"), as_of=0)
    report = verify_location(client, samples=50, seed=1)
    assert report.ok, [f.describe() for f in report.findings]
    kinds = {name: o.kind for name, o in report.objects.items()}
    assert kinds == {
        "orders": "shard",
        "v": "view",
        "src.remap": "remap",
        "timeshard_status": "status",
        CATALOG_SHARD: "catalog",
    }
    # Every change time, and always since and upper - 1.
    assert sorted(report.objects["orders"].times["multiplicity"]) == [0, 1, 2, 4]
    assert sorted(report.objects["src.remap"].times["multiplicity"]) == [0, 3, 6]
    assert report.objects["v"].notes == ["not recomputed: needs Spark"]


def test_what_verify_cannot_recompute_is_noted_not_passed_in_silence(
    client: PersistClient,
) -> None:
    """A counter source's export, and every shard of a location with no catalog, passed
    with no note: verify was ok though it compared no data with anything."""
    write_orders(client, "n")
    report = verify_location(client, samples=5, seed=1)
    assert report.ok and report.objects[CATALOG_SHARD].notes == [
        "the location has no catalog: no view or export is recomputed"
    ]
    Remap(client, "n.remap").mint(4, {})
    record_source(client, "n", CounterGenerator("n"), {}, {"": "n"})
    report = verify_location(client, samples=5, seed=1)
    assert report.ok and report.objects["n"].notes == [
        "not recomputed: a counter source cannot be read again from its start"
    ]
    assert report.objects[CATALOG_SHARD].notes == []


def test_a_closed_shard_is_read_up_to_its_last_change(client: PersistClient) -> None:
    writer = client.open_writer("closed", SCHEMA)
    writer.append([(("a", 1), 0, 1), (("a", 1), 3, -1), (("b", 1), 3, 1)], 0, None)
    report = verify_location(client, samples=5, seed=1)
    assert report.ok and client.state("closed").upper.is_empty()
    assert sorted(report.objects["closed"].times["multiplicity"]) == [0, 3]


def test_sampling_is_seeded_and_keeps_the_ends() -> None:
    candidates = list(range(0, 1000, 7))
    a = sample_times(random.Random(5), candidates, 3, 900, 4)
    assert a == sample_times(random.Random(5), candidates, 3, 900, 4)
    assert a[0] == 3 and a[-1] == 900 and len(a) == 6
    assert set(a[1:-1]) <= set(candidates)
    assert sample_times(random.Random(5), candidates, 3, 900, 0) == [3, 900]
    assert sample_times(random.Random(5), [], 4, 4, 3) == [4]
    assert sample_times(random.Random(5), [1, 2], 5, 4, 3) == []


def test_a_deleted_part_is_reported(client: PersistClient) -> None:
    write_orders(client)
    part = client.state("orders").batches[1].parts[0]
    client.location.blob.delete(part.key)
    report = verify_location(client, samples=50, seed=1)
    f = only(report)
    assert (f.object, f.check) == ("orders", "part")
    assert f.message == f"part {part.key!r} of batch 1 [[2], [3]) is missing"
    # Times before the lost batch were still checked; later ones are noted, not crashed on.
    assert sorted(report.objects["orders"].times["multiplicity"]) == [0, 1]
    assert any("is missing" in n for n in report.objects["orders"].notes)


def test_a_corrupt_part_is_reported(client: PersistClient) -> None:
    write_orders(client)
    part = client.state("orders").batches[0].parts[0]
    client.location.blob.delete(part.key)
    client.location.blob.set(part.key, b"not parquet at all")
    f = only(verify_location(client, samples=50, seed=1))
    assert (f.object, f.check) == ("orders", "part")
    assert f.message.startswith(f"part {part.key!r} of batch 0 [[0], [2]) is corrupt: ")


def test_a_negative_multiplicity_in_a_view_is_reported(client: PersistClient) -> None:
    write_orders(client)
    client.open_writer("orders").append([], 5, 6)
    write_orders(client, "v")
    record_view(client, ViewDefinition("v", {"o": "orders"}, "SELECT * FROM o"), as_of=0)
    writer = client.open_writer("v")
    writer.append([(("zz", 9), 5, -1)], 5, 6)
    report = verify_location(client, samples=50, seed=1)
    f = only(report)
    assert (f.object, f.check, f.time) == ("v", "multiplicity", 5)
    assert f.message == "1 row with negative multiplicity"
    assert f.rows == ({"k": "zz", "v": 9, "_diff": -1, "_err": None},)
    assert report.objects["v"].kind == "view"
    assert not report.ok
    assert f.describe() == (
        "v [multiplicity] at time 5: 1 row with negative multiplicity\n"
        '  row     {"k": "zz", "v": 9} x -1'
    )


def test_views_may_hold_duplicates_but_sets_may_not(client: PersistClient) -> None:
    writer = client.open_writer("v", SCHEMA)
    writer.append([(("a", 1), 0, 2)], 0, 1)
    write_orders(client)
    record_view(client, ViewDefinition("v", {"o": "orders"}, "SELECT k, v FROM o"), as_of=0)
    Remap(client, "kv.remap").mint(1, {})
    record_source(client, "kv", KeyValueGenerator(), {"": ("upsert", ["key"])}, {"": "kv"})
    kv = client.open_writer("kv", KeyValueGenerator().payload_schema())
    kv.append([((1, "x"), 0, 1), ((2, "y"), 0, 2)], 0, 1)
    kv.append([((1, "z"), 1, 1)], 1, 2)
    report = verify_location(client, samples=50, seed=1)
    assert report.objects["v"].findings == 0  # a multiset, like SQL
    found = {(f.object, f.check, f.time): f for f in report.findings}
    assert set(found) == {("kv", "multiplicity", 0), ("kv", "multiplicity", 1), ("kv", "key", 1)}
    assert found[("kv", "multiplicity", 0)].message == (
        "1 row with multiplicity above 1 in this upsert export, which must be a set"
    )
    key = found[("kv", "key", 1)]
    assert key.message == "1 key of ['key'] with more than one row in this upsert export"
    assert sorted((r["key"], r["value"]) for r in key.rows) == [(1, "x"), (1, "z")]


def gap(state: ShardState) -> ShardState:
    b = state.batches[2]
    moved = replace(b, desc=Description(Frontier(4), b.desc.upper, b.desc.since))
    return replace(state, batches=(*state.batches[:2], moved))


def test_batches_must_be_contiguous(client: PersistClient) -> None:
    write_orders(client)
    state = client.state("orders")
    assert check_batches(state) == []
    [f] = check_batches(gap(state))
    assert (f.object, f.check) == ("orders", "batches")
    assert f.message == "gap: batch 2 [[4], [5]) starts after the previous batch's upper [3]"
    b0, b1, _ = state.batches
    overlap = replace(b1, desc=Description(Frontier(1), Frontier(3)))
    messages = [f.message for f in check_batches(replace(state, batches=(b0, overlap)))]
    assert messages == [
        "batch 1 [[1], [3]) overlaps the previous batch (which ends at [2])",
        "the batches end at [3] but the shard upper is [5]",
    ]
    # Stored, such a state is found by verify, whether decoding or the check rejects it.
    tamper(client, "orders", gap)
    f = only(verify_location(client, samples=50, seed=1))
    assert f.object == "orders" and f.check in ("state", "batches")
    assert "batch 2" in f.message and "[4]" in f.message and "[3]" in f.message


def test_parts_must_match_their_meta_and_description(client: PersistClient) -> None:
    write_orders(client)

    def shift(state: ShardState) -> ShardState:
        b0, b1, b2 = state.batches
        b0 = replace(b0, desc=Description(Frontier(0), Frontier(1)))
        b1 = replace(b1, desc=Description(Frontier(1), Frontier(3)))
        b2 = replace(b2, parts=(replace(b2.parts[0], num_rows=7),))
        return replace(state, batches=(b0, b1, b2))

    tamper(client, "orders", shift)
    report = verify_location(client, samples=50, seed=1)
    messages = sorted(f.message.split(" of ", 1)[1] for f in report.findings)
    assert messages == [
        "batch 0 [[0], [1]) holds 1 updates at times outside its description (since [0])",
        "batch 2 [[3], [5]) has 1 rows, the state says 7",
    ]
    outside = next(f for f in report.findings if "outside" in f.message)
    assert [(r["k"], r["_ts"]) for r in outside.rows] == [("b", 1)]


def test_updates_below_a_batchs_lower_are_outside_it_whatever_its_since(
    client: PersistClient,
) -> None:
    """An uncompacted batch's since is [0]: updates at 0 in batch [3, 5) passed as "at the
    since", though compaction only moves times up to its since, never below its lower."""
    write_orders(client)
    donor = client.open_writer("orders").batch([(("z", 9), 0, 1)], 0, 1).parts[0]

    def add(state: ShardState) -> ShardState:
        b0, b1, b2 = state.batches
        assert b2.desc.since == Frontier(0) and b2.desc.lower == Frontier(3)
        return replace(state, batches=(b0, b1, replace(b2, parts=(*b2.parts, donor))))

    tamper(client, "orders", add)
    report = verify_location(client, samples=50, seed=1)
    [finding] = [f for f in report.findings if f.object == "orders"]
    assert "batch 2 [[3], [5]) holds 1 updates at times outside" in finding.message
    assert [(r["k"], r["_ts"]) for r in finding.rows] == [("z", 0)]


def test_corrupt_state_is_a_finding_not_a_crash(client: PersistClient) -> None:
    write_orders(client)
    write_orders(client, "other")
    consensus = client.location.consensus
    head = consensus.head("orders")
    assert head is not None
    consensus.compare_and_set("orders", head.seqno, VersionedData(head.seqno + 1, b"{garbage"))
    report = verify_location(client, samples=3, seed=1)
    f = only(report)
    assert (f.object, f.check) == ("orders", "state")
    assert "cannot be decoded" in f.message and f"seqno {head.seqno + 1}" in f.message
    assert report.objects["other"].findings == 0 and report.objects["other"].times


def test_a_hold_beyond_the_upper_leaves_upper_minus_one_readable(
    client: PersistClient,
) -> None:
    write_orders(client)
    client.open_leased_reader("orders").downgrade_since(9)
    report = verify_location(client, samples=3, seed=1)
    assert report.ok
    assert report.objects["orders"].notes == []
    assert client.state("orders").since == Frontier(4)


def test_since_beyond_upper_minus_one_is_a_finding(client: PersistClient) -> None:
    write_orders(client)
    consensus = client.location.consensus
    state = client.state("orders")
    broken = replace(state, seqno=state.seqno + 1, since=Frontier(9))
    consensus.compare_and_set(
        "orders", state.seqno, VersionedData(broken.seqno, encode_state(broken))
    )
    report = verify_location(client, samples=3, seed=1)
    f = only(report)  # the state no longer decodes: it breaks state invariant 1
    assert (f.object, f.check) == ("orders", "state")
    assert "since [9] is beyond 4, the last time of upper [5]" in f.message


def test_rows_are_truncated_with_a_count(client: PersistClient) -> None:
    writer = client.open_writer("v", SCHEMA)
    writer.append([((f"k{i:02}", i), 0, -1) for i in range(15)], 0, 1)
    write_orders(client)
    record_view(client, ViewDefinition("v", {"o": "orders"}, "SELECT * FROM o"), as_of=0)
    f = only(verify_location(client, samples=3, seed=1))
    assert f.rows_total == 15 and len(f.rows) == 10
    text = f.describe().splitlines()
    assert len(text) == 12 and text[-1] == "  ... and 5 more row rows"


def test_an_undecodable_catalog_row_is_a_finding(client: PersistClient) -> None:
    from timeshard.catalog import CATALOG_KEYS, CATALOG_SCHEMA

    write_orders(client, "v")
    write_orders(client, "o")
    upsert = FeedbackUpsert(client, CATALOG_SHARD, CATALOG_SCHEMA, list(CATALOG_KEYS))
    upsert.apply([UpsertCommand(("v", "view"), ("{not json",), 3, (0,))], 4)
    report = verify_location(client, samples=3, seed=1)
    f = only(report)
    assert (f.object, f.check) == (CATALOG_SHARD, "catalog")
    assert f.message.startswith("catalog row ('v', 'view'): definition is not JSON")
    # Recording replaces it.
    assert record_view(client, ViewDefinition("v", {"o": "o"}, "SELECT 1"), as_of=0) == 1
    assert verify_location(client, samples=3, seed=1).ok


def test_bad_arguments_name_the_value(client: PersistClient) -> None:
    with pytest.raises(InvalidUsage, match="samples must be a non-negative int, got -1"):
        verify_location(client, samples=-1)
    with pytest.raises(InvalidUsage, match="seed must be an int, got 'x'"):
        verify_location(client, seed="x")  # type: ignore[arg-type]
    with pytest.raises(InvalidUsage, match="catalog kind must be one of"):
        CatalogEntry("v", "table", {})


# -- the catalog ---------------------------------------------------------------------------


def test_recording_a_view_is_idempotent(client: PersistClient) -> None:
    definition = ViewDefinition(
        "v", {"b": "bids", "a": "auctions"}, "SELECT 1 AS x", refresh_every_ms=60
    )
    assert record_view(client, definition, as_of=5) == 1
    upper = client.state(CATALOG_SHARD).upper
    assert record_view(client, definition, as_of=5) == 0
    assert record_view(client, definition, as_of=9) == 0  # reinstalled: correct since 5
    assert client.state(CATALOG_SHARD).upper == upper  # nothing was written
    [entry] = read_catalog(client)
    assert (entry.name, entry.kind) == ("v", "view")
    assert entry.definition == {
        "inputs": {"a": "auctions", "b": "bids"},
        "sql": "SELECT 1 AS x",
        "function": None,
        "refresh_every_ms": 60,
        "retain_history_ms": None,
        "holds": {"auctions": "view.v", "bids": "view.v"},
        "as_of": 5,
    }
    changed = ViewDefinition("v", {"a": "auctions"}, "SELECT 2 AS x")
    assert record_view(client, changed, as_of=9) == 1
    [entry] = read_catalog(client)
    assert entry.definition["sql"] == "SELECT 2 AS x" and entry.definition["as_of"] == 9


def by_name(df: object) -> object:
    return df


def test_a_function_view_is_recorded_without_sql(client: PersistClient) -> None:
    write_orders(client)
    write_orders(client, "fv")
    record_view(client, ViewDefinition("fv", {"o": "orders"}, function=by_name), as_of=0)
    [entry] = read_catalog(client)
    assert entry.definition["sql"] is None
    assert entry.definition["function"] == f"{__name__}:by_name"
    report = verify_location(client, samples=3, seed=1)
    assert report.ok
    assert report.objects["fv"].notes == [
        f"not recomputable: defined by a Python function ({__name__}:by_name)"
    ]


def test_recording_sources(client: PersistClient, tmp_path: Path) -> None:
    files = FileSource(
        "events", tmp_path, "json", pa.schema([("id", pa.int64()), ("x", pa.float64())])
    )
    assert record_source(client, "events", files, {"": ("upsert", ["id"])}, {"": "events"}) == 2
    assert record_source(client, "events", files, {"": ("upsert", ["id"])}, {"": "events"}) == 0
    kv = KeyValueGenerator(keys=7, ticks=3)
    assert record_source(client, "kv", kv, {}, {"": "kv"}) == 2
    kv.ticks = 9  # progress is not declaration
    assert record_source(client, "kv", kv, {}, {"": "kv"}) == 0
    entries = {(e.name, e.kind): e.definition for e in read_catalog(client)}
    assert entries[("events", "source")] == {
        "source_kind": "file",
        "options": {
            "name": "events",
            "path": str(tmp_path.resolve()),
            "format": "json",
            "columns": [["id", "int64"], ["x", "double"]],
            "avro_schema": None,
            "max_line_bytes": DEFAULT_MAX_LINE_BYTES,
        },
        "remap": "events.remap",
        "exports": {"events": {"subsource": "", "envelope": "upsert", "key_columns": ["id"]}},
    }
    assert entries[("events", "export")] == {
        "source": "events",
        "subsource": "",
        "envelope": "upsert",
        "key_columns": ["id"],
    }
    assert entries[("kv", "source")]["options"] == {
        "name": "kv",
        "keys": 7,
        "value_size": 16,
        "partitions": 2,
        "rate": 500,
        "seed": 0,
        "deletes": 0.0,
    }
    assert entries[("kv", "export")]["envelope"] == "none"
    subs = source_entries(
        "auction", object(), {}, {"bids": "auction.bids", "users": "auction.users"}
    )
    assert [(e.name, e.kind) for e in subs] == [
        ("auction", "source"),
        ("auction.bids", "export"),
        ("auction.users", "export"),
    ]
    assert subs[0].definition["source_kind"] == "other"
    assert subs[0].definition["class"] == "builtins:object"


def test_definitions_must_be_json(client: PersistClient) -> None:
    with pytest.raises(InvalidUsage, match="is not JSON"):
        Catalog(client).record([CatalogEntry("x", "view", {"when": object()})])
    with pytest.raises(InvalidUsage, match="repeat"):
        Catalog(client).record([CatalogEntry("x", "view", {}), CatalogEntry("x", "view", {})])
    assert CATALOG_SHARD not in client.list_shards()


# -- the command ---------------------------------------------------------------------------


def test_cli_verify(tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    write_orders(client)
    out = runner.invoke(app, ["verify", str(tmp_path), "--seed", "4"])
    assert out.exit_code == 0, out.output
    assert "orders" in out.output and "verified" in out.output and "seed 4" in out.output

    part = client.state("orders").batches[2].parts[0]
    client.location.blob.delete(part.key)
    out = runner.invoke(app, ["verify", str(tmp_path), "--json", "--samples", "2", "--seed", "4"])
    assert out.exit_code == 1, out.output
    doc = json.loads(out.output)
    assert doc["ok"] is False and doc["seed"] == 4 and doc["samples"] == 2
    assert [(f["object"], f["check"]) for f in doc["findings"]] == [("orders", "part")]
    assert part.key in doc["findings"][0]["message"]
    out = runner.invoke(app, ["verify", str(tmp_path)])
    assert out.exit_code == 1 and f"part {part.key!r} of batch 2" in out.output


def test_cli_verify_bad_arguments(tmp_path: Path) -> None:
    write_orders(PersistClient(Location.embedded(tmp_path)))
    out = runner.invoke(app, ["verify", str(tmp_path / "nowhere")])
    assert out.exit_code != 0
    assert "nowhere" in str(out.exception) + out.output
    out = runner.invoke(app, ["verify", str(tmp_path), "--samples", "-3"])
    assert out.exit_code != 0 and "-3" in str(out.exception) + out.output
    out = runner.invoke(
        app, ["verify", str(tmp_path), "--blob", "memory://x", "--consensus", "memory://x"]
    )
    assert out.exit_code != 0 and "not both" in str(out.exception) + out.output


def test_file_source_options_round_trip(tmp_path: Path) -> None:
    """What the catalog records of a FILE source rebuilds the same source (limit included)."""
    from timeshard.catalog import source_options
    from timeshard.verify.replay import file_source

    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    original = FileSource("f", tmp_path, "json", schema, max_line_bytes=1234)
    rebuilt = file_source(json.loads(json.dumps(source_options(original))))
    assert (rebuilt.name, rebuilt.path, rebuilt.format) == ("f", original.path, "json")
    assert rebuilt.schema == schema and rebuilt.max_line_bytes == 1234


@pytest.mark.parametrize(
    "options",
    [
        {"key_format": "json", "key_schema": pa.schema([("id", pa.int64())])},
        {"key_format": "text", "metadata": ["partition", "offset", "headers"]},
        {
            "value_format": "avro",
            "value_schema": None,
            "value_avro_schema": '{"type": "record", "name": "r", "fields": '
            '[{"name": "n", "type": "long"}]}',
            "avro_schemas": {7: '{"type": "record", "name": "r", "fields": []}'},
        },
    ],
)
def test_kafka_source_options_round_trip(options: dict[str, Any]) -> None:
    """What the catalog records of a KAFKA source (as JSON) rebuilds the same source."""
    from timeshard.catalog import source_kind, source_options
    from timeshard.storage.kafka_source import KafkaSource
    from timeshard.verify.replay import kafka_source

    value = pa.schema([("name", pa.string()), ("n", pa.int64())])
    original = KafkaSource("k", "127.0.0.1:9", "topic.a", **{"value_schema": value, **options})
    recorded = json.loads(json.dumps(source_options(original)))
    rebuilt = kafka_source(recorded)
    assert source_kind(original) == "kafka"
    assert rebuilt.schema == original.schema and rebuilt.topic == "topic.a"
    same = ["key_format", "value_format", "metadata", "value_avro_schema", "avro_schemas"]
    assert [getattr(rebuilt, a) for a in same] == [getattr(original, a) for a in same]
    assert rebuilt.group_id == "timeshard-k-verify"  # verify's reads join no group of the source


def test_a_recorded_postgres_dsn_has_no_password() -> None:
    from timeshard.catalog import _without_password

    assert "s3cret" not in _without_password("postgresql://app:s3cret@db:5433/shop?sslmode=require")
    kept = _without_password("host=db user=app password=s3cret dbname=shop")
    assert sorted(kept.split()) == ["dbname=shop", "host=db", "user=app"]


def test_recording_leaves_no_handle_on_the_catalog(client: PersistClient) -> None:
    record_view(client, ViewDefinition("v", {"o": "orders"}, "SELECT 1 AS x"), as_of=0)
    state = client.state(CATALOG_SHARD)
    assert not state.writers and not state.leased_readers


# -- parts that readers reject ------------------------------------------------------------


def flip_created_by(data: bytes) -> bytes:
    """``data`` with one byte of the Parquet footer's ``created_by`` changed: the same size,
    still decodes, but its SHA-256 is another."""
    i = data.rfind(b"parquet-cpp-arrow")
    assert i > 0
    return data[:i] + b"P" + data[i + 1 :]


def test_a_part_whose_digest_differs_is_reported(client: PersistClient) -> None:
    """A part of the recorded size whose SHA-256 differs decoded, so verify passed it,
    though every reader raises PartError on it (the shard is unreadable)."""
    write_orders(client)
    part = client.state("orders").batches[0].parts[0]
    assert part.sha256 is not None
    bad = flip_created_by(client.location.blob.get(part.key) or b"")
    client.location.blob.delete(part.key)
    client.location.blob.set(part.key, bad)
    report = verify_location(client, samples=50, seed=1)
    f = only(report)
    assert (f.object, f.check) == ("orders", "part")
    assert f.message == (
        f"part {part.key!r} of batch 0 [[0], [2]) is corrupt: its SHA-256 differs from the "
        "one the state recorded"
    )
    assert report.objects["orders"].notes  # every time reads it: noted, reported above


class SpoilingBlob(MemoryBlob):
    """A memory blob whose ``key`` reads as other bytes after its first read."""

    def __init__(self) -> None:
        super().__init__()
        self.key = ""
        self.reads = 0

    def get(self, key: str) -> bytes | None:
        data = super().get(key)
        if key != self.key or data is None:
            return data
        self.reads += 1
        return data if self.reads == 1 else flip_created_by(data)


def test_a_part_unreadable_after_its_check_is_a_finding() -> None:
    """A PartError at every sampled time was a note: verify said ok of a shard no reader
    could read."""
    blob = SpoilingBlob()
    client = PersistClient(Location(blob, MemoryConsensus()))
    write_orders(client)
    blob.key = client.state("orders").batches[0].parts[0].key
    report = verify_location(client, samples=50, seed=1)
    assert not report.ok
    assert {(f.object, f.check) for f in report.findings} == {("orders", "multiplicity")}
    f = report.findings[0]
    assert f.message.startswith("the shard cannot be read at 4 of 4 sampled times [0, 1, 2, 4]: ")
    assert f"part {blob.key!r} is corrupt: its SHA-256 differs" in f.message


def test_recorded_err_rows_and_times_must_match_the_part(client: PersistClient) -> None:
    """Readers trust a part's recorded err_rows (a 0 skips its errors) and times (an
    incremental read skips a part without the time), yet verify compared neither."""
    writer = client.open_writer("s", SCHEMA)
    rows = {"k": ["a", None, "b"], "v": [1, None, 2], "_ts": [0, 0, 3]}
    writer.append(pa.table({**rows, "_diff": [1, 1, 1], "_err": [None, "bad json", None]}), 0, 5)
    writer.expire()
    part = client.state("s").batches[0].parts[0]
    assert (part.err_rows, part.times) == (1, (0, 3))
    assert verify_location(client, samples=50, seed=1).ok

    def meta(**wrong: Any) -> None:
        tamper(
            client,
            "s",
            lambda st: replace(
                st, batches=(replace(st.batches[0], parts=(replace(part, **wrong),)),)
            ),
        )

    meta(err_rows=0, times=(0, 2, 3))
    f = only(verify_location(client, samples=50, seed=1))
    assert (f.object, f.check) == ("s", "part")
    assert f.message == (
        f"part {part.key!r} of batch 0 [[0], [5]) has 1 err rows, the state says 0; "
        "_ts values [0, 3], the state says [0, 2, 3]"
    )
    meta(err_rows=None, times=None)  # not recorded (older states): nothing to compare
    assert verify_location(client, samples=50, seed=1).ok


# -- remap shards ----------------------------------------------------------------------------


def test_a_remap_whose_frontier_moves_back_is_reported(client: PersistClient) -> None:
    """Bindings are monotone in t (DESIGN), but a remap shard got only the set check: one
    whose partition went from offset 9 back to 2 passed, and reclocking ignored it."""
    writer = client.open_writer("src.remap", REMAP_SCHEMA)
    writer.append([(("0", 5), 1, 1), (("1", 4), 1, 1)], 0, 2)
    writer.append([(("0", 5), 3, -1), (("0", 9), 3, 1)], 2, 4)
    writer.append([(("0", 9), 5, -1), (("0", 2), 5, 1), (("1", 4), 5, -1)], 4, 6)
    writer.append([(("0", 2), 6, -1), (("0", 12), 6, 1), (("1", 4), 6, 1)], 6, 7)
    writer.expire()
    report = verify_location(client, samples=50, seed=1)
    f = only(report)
    assert (f.object, f.check, f.time) == ("src.remap", "bindings", 5)
    assert f.message == (
        "the bound frontier moves back at 5 (bindings are monotone in time): partition '0' "
        "from offset 9 (bound at 3) to 2, partition '1' from offset 4 (bound at 1) to 0"
    )
    assert report.objects["src.remap"].kind == "remap"
    assert "bindings" in report.objects["src.remap"].checks


def test_an_upsert_export_keyed_by_no_column_of_its_own_is_reported(
    client: PersistClient,
) -> None:
    """The duplicate-key check ran only if the catalog's key columns were in the shard:
    an upsert export whose key it does not hold (or without a key) was never checked."""
    kv = client.open_writer("kv", KeyValueGenerator().payload_schema())
    kv.append([((1, "x"), 0, 1), ((1, "y"), 0, 1)], 0, 1)
    kv.expire()
    Remap(client, "kv.remap").mint(0, {})
    record_source(client, "kv", KeyValueGenerator(), {"": ("upsert", ["id"])}, {"": "kv"})
    report = verify_location(client, samples=5, seed=1)
    f = only(report)
    assert (f.object, f.check) == ("kv", "key")
    assert f.message == (
        "the catalog keys this upsert export by ['id'], which are not all columns of its "
        "shard (key, value): one row per key is not checked"
    )


# -- frontiers that run ahead of what determines them ----------------------------------------


def test_an_export_ahead_of_its_remap_is_reported(client: PersistClient, tmp_path: Path) -> None:
    """An export is definite only where its bindings are: its times at or beyond the
    remap shard's upper were compared with nothing, and nothing said so."""
    files = FileSource("events", tmp_path, "json", pa.schema([("id", pa.int64())]))
    record_source(client, "events", files, {"": ("upsert", ["id"])}, {"": "events"})
    remap = client.open_writer("events.remap", REMAP_SCHEMA)
    remap.append([(("a.jsonl", 7), 1, 1)], 0, 5)
    remap.expire()
    export = client.open_writer("events", files.payload_schema())
    export.append([((1,), 1, 1)], 0, 5)
    assert verify_location(client, samples=5, seed=1).ok
    export.append([((99,), 6, 1)], 5, 10)
    f = only(verify_location(client, samples=5, seed=1))
    assert (f.object, f.check, f.time) == ("events", "frontiers", 5)
    assert f.message == (
        "the export's upper [10] is beyond the upper [5] of its remap shard 'events.remap': "
        "its content from 5 on is bound to no source record"
    )


def test_a_view_ahead_of_its_inputs_is_reported(client: PersistClient) -> None:
    """A view's upper never passes the frontier its inputs determine; one that did got a
    note ("inputs not readable"), and the times beyond were compared with nothing."""
    write_orders(client)  # upper [5]
    write_orders(client, "v")
    record_view(client, ViewDefinition("v", {"o": "orders"}, "SELECT * FROM o"), as_of=0)
    assert verify_location(client, samples=5, seed=1).ok
    client.open_writer("v").append([(("zz", 9), 6, 1)], 5, 9)
    f = only(verify_location(client, samples=5, seed=1))
    assert (f.object, f.check, f.time) == ("v", "frontiers", 5)
    assert f.message == (
        "the view's upper [9] is beyond [5], the frontier up to which its inputs determine "
        "it: its content from 5 on follows from no query"
    )
    # Refreshed every 4 ms, it shows the inputs at 4 until 8: [8] is its frontier.
    refreshed = ViewDefinition("r", {"o": "orders"}, function=by_name, refresh_every_ms=4)
    record_view(client, refreshed, as_of=0)
    writer = client.open_writer("r", SCHEMA)
    writer.append([], 0, 8)
    assert {f.object for f in verify_location(client, samples=5, seed=1).findings} == {"v"}
    writer.append([], 8, 9)
    found = {f.object: f for f in verify_location(client, samples=5, seed=1).findings}
    assert found["r"].message.startswith("the view's upper [9] is beyond [8], the frontier")


def test_a_dropped_view_closed_ahead_of_its_inputs_is_no_finding(client: PersistClient) -> None:
    """A dropped view's shard is closed (its upper empty) while its inputs go on: its
    content from its last time on is the drop's, not the query's. The frontier check
    found it "ahead" (serve's replica test: a view dropped on one writer)."""
    write_orders(client)  # upper [5]
    write_orders(client, "v")
    record_view(client, ViewDefinition("v", {"o": "orders"}, "SELECT * FROM o"), as_of=0)
    client.close_shard("v")
    report = verify_location(client, samples=5, seed=1)
    assert report.ok, report.findings
    assert any("closed" in n for n in report.objects["v"].notes), report.objects["v"].notes


def test_a_view_whose_input_is_missing_is_reported(client: PersistClient) -> None:
    write_orders(client, "v")
    record_view(client, ViewDefinition("v", {"o": "orders"}, "SELECT * FROM o"), as_of=0)
    f = only(verify_location(client, samples=5, seed=1))
    assert (f.object, f.check) == ("v", "frontiers")
    assert f.message == "its input 'o' is shard 'orders', which does not exist"


@pytest.mark.parametrize("every", [None, 1, 4, 5, 7])
@pytest.mark.parametrize("uppers", [(0,), (5,), (8, 3), (None, 6), (None,), (9, 12)])
def test_the_view_frontier_is_desireds(
    client: PersistClient, every: int | None, uppers: tuple[int | None, ...]
) -> None:
    """verify's frontier of a view (without Spark) is SparkViewDesired.frontier()."""
    from timeshard.compute.view import SparkViewDesired
    from timeshard.verify.views import desired_frontier

    inputs = {}
    for i, upper in enumerate(uppers):
        writer = client.open_writer(f"in{i}", SCHEMA)
        if upper != 0:
            writer.append([], 0, upper)
        inputs[f"i{i}"] = f"in{i}"
    definition = ViewDefinition("v", inputs, "SELECT 1", refresh_every_ms=every)
    expected = SparkViewDesired(None, client, definition).frontier()
    assert (
        desired_frontier([Frontier.empty() if u is None else Frontier(u) for u in uppers], every)
        == expected
    )


def test_parts_collected_while_the_state_kept_moving_are_no_finding(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a live location whose state moved at each of the three reads, the parts of the
    last state read that compaction had replaced and GC deleted meanwhile were reported
    missing, though the head no longer referenced them: a false divergence."""
    write_orders(client)
    old = client.state("orders")
    assert client.compact("orders") > 0
    client.gc("orders")
    new = client.state("orders")
    gone = {p.key for b in old.batches for p in b.parts} - {
        p.key for b in new.batches for p in b.parts
    }
    assert gone and all(client.location.blob.get(k) is None for k in gone)
    moving = [old, new, old, new, old, new]  # every check read an older state than the head
    state = client.state

    def live(shard_id: str) -> ShardState:
        if shard_id == "orders" and moving:
            return moving.pop(0)
        return state(shard_id)

    monkeypatch.setattr(client, "state", live)
    report = verify_location(client, samples=50, seed=1)
    assert report.ok, [f.describe() for f in report.findings]
    assert any("moved" in n for n in report.objects["orders"].notes)


def test_an_input_file_rewritten_to_its_length_is_not_retained(tmp_path: Path) -> None:
    """verify checked an input file's presence and size only: one rewritten with other
    lines of the same length read as the records bound from it, and the source's shard
    was reported as differing from them (a false difference); now it is not replayed."""
    from timeshard.verify.replay import _retained

    root = tmp_path / "in"
    root.mkdir()
    (root / "a.jsonl").write_text('{"k": 1}\n{"k": 2}\n')
    source = FileSource("f", root, "text")
    end = source.upper()  # as bound: each file's offset and fingerprint
    assert _retained(source, end) is None
    (root / "a.jsonl").write_text('{"k": 3}\n{"k": 4}\n')
    reason = _retained(source, end)
    assert reason is not None and "no longer holds the bytes bound from it" in reason
