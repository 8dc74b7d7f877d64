"""Write and read handles: bad input, leases, fencing, listen, compaction, GC."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from timeshard import (
    CorruptState,
    Determinate,
    Fenced,
    Frontier,
    Indeterminate,
    InvalidUsage,
    LeaseExpired,
    PartError,
    SinceError,
    UpperMismatch,
)
from timeshard.location import FileBlob, Location, MemoryBlob, MemoryConsensus, VersionedData
from timeshard.persist import (
    Appended,
    OpaqueMismatch,
    PersistClient,
    PersistConfig,
    Progress,
    Updates,
    expire_all,
)
from timeshard.persist._internal.parts import consolidate, updates_schema

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


class Clock:
    def __init__(self) -> None:
        self.now = 10_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def client(clock: Clock) -> PersistClient:
    config = PersistConfig(clock=clock, backoff_ms=0.0, reader_lease_ms=1000, writer_lease_ms=1000)
    return PersistClient(Location(MemoryBlob(), MemoryConsensus()), config)


def rows(table: pa.Table) -> list[tuple[str, int, int]]:
    return sorted((r["k"], r["v"], r["_diff"]) for r in table.to_pylist())


def test_write_then_read(client: PersistClient) -> None:
    w, r = client.open("s", SCHEMA)
    assert w.upper == Frontier(0)
    w.append([(("a", 1), 0, 1), (("b", 2), 1, 1)], 0, 2)
    w.append([(("a", 1), 2, -1), ({"k": "c", "v": 3}, 3, 2)], 2, 5)
    assert w.fetch_recent_upper() == Frontier(5)
    assert rows(r.snapshot(0)) == [("a", 1, 1)]
    assert rows(r.snapshot(1)) == [("a", 1, 1), ("b", 2, 1)]
    assert rows(r.snapshot(4)) == [("b", 2, 1), ("c", 3, 2)]
    assert set(r.snapshot(4).column("_ts").to_pylist()) == {4}


def test_arrow_table_and_err_rows(client: PersistClient) -> None:
    w, r = client.open("s", SCHEMA)
    table = pa.table(
        {
            "k": ["a", None],
            "v": [1, None],
            "_ts": [0, 0],
            "_diff": [1, 1],
            "_err": [None, "bad json at offset 7"],
        }
    )
    w.append(table, 0, 1)
    snap = r.snapshot(0).to_pylist()
    assert {x["_err"] for x in snap} == {None, "bad json at offset 7"}


@pytest.mark.parametrize("shard_id", ["", "../x", "a/b", ".hidden", "x" * 201, "a b", "-x"])
def test_invalid_shard_id(client: PersistClient, shard_id: str) -> None:
    with pytest.raises(InvalidUsage, match="invalid shard id"):
        client.open_writer(shard_id, SCHEMA)
    assert client.list_shards() == []


def test_unknown_shard(client: PersistClient) -> None:
    with pytest.raises(InvalidUsage, match="unknown shard id 'nope'"):
        client.open_leased_reader("nope")


def test_schema_mismatch(client: PersistClient) -> None:
    client.open_writer("s", SCHEMA)
    other = pa.schema([("k", pa.string()), ("v", pa.string())])
    with pytest.raises(InvalidUsage, match="schema mismatch for shard 's'"):
        client.open_writer("s", other)
    w = client.open_writer("s")
    with pytest.raises(InvalidUsage, match="schema mismatch"):
        w.append(pa.table({"k": ["a"], "x": [1], "_ts": [0], "_diff": [1]}), 0, 1)
    with pytest.raises(InvalidUsage, match="schema mismatch"):
        w.append([(("a", 1, 2), 0, 1)], 0, 1)
    with pytest.raises(InvalidUsage, match="schema mismatch"):
        w.append([(("a", "not an int"), 0, 1)], 0, 1)
    assert client.state("s").upper == Frontier(0)
    assert list(client.location.blob.list_keys()) == []


def test_bounds_are_checked_and_nothing_written(client: PersistClient) -> None:
    w = client.open_writer("s", SCHEMA)
    with pytest.raises(InvalidUsage, match=r"update at time 1 is not beyond lower \[2\]"):
        w.batch([(("a", 1), 1, 1)], 2, 4)
    with pytest.raises(InvalidUsage, match=r"update at time 4 is beyond upper \[4\]"):
        w.batch([(("a", 1), 4, 1)], 2, 4)
    with pytest.raises(InvalidUsage, match=r"lower \[4\] is beyond upper \[2\]"):
        w.batch([], 4, 2)
    with pytest.raises(InvalidUsage, match="expected upper"):
        w.compare_and_append_batch([], 3, 1)
    assert list(client.location.blob.list_keys()) == []


def test_regressing_frontier_is_a_mismatch(client: PersistClient) -> None:
    w = client.open_writer("s", SCHEMA)
    w.append([], 0, 5)
    result = w.compare_and_append([], 2, 3)
    assert result == UpperMismatch(Frontier(2), Frontier(5))
    with pytest.raises(UpperMismatch):
        w.append([(("a", 1), 3, 1)], 3, 4)
    assert list(client.location.blob.list_keys()) == []


def test_batch_from_another_shard(client: PersistClient) -> None:
    w1 = client.open_writer("s1", SCHEMA)
    w2 = client.open_writer("s2", SCHEMA)
    b = w1.batch([(("a", 1), 0, 1)], 0, 1)
    with pytest.raises(InvalidUsage, match="batch from shard 's1'"):
        w2.compare_and_append_batch([b], 0, 1)
    with pytest.raises(InvalidUsage, match="batch from shard 's1'"):
        w2.batch_from_transmittable(b.into_transmittable())
    with pytest.raises(InvalidUsage, match="not a transmittable batch"):
        w2.batch_from_transmittable(b"garbage")
    # Parts named under another shard or writer: GC would take them for another's.
    other = w2.batch([(("b", 2), 0, 1)], 0, 1)
    forged = json.loads(other.into_transmittable())
    forged["owner"] = "someone"
    with pytest.raises(InvalidUsage, match="are not under s2/someone/"):
        w2.batch_from_transmittable(json.dumps(forged).encode())


def test_batch_lifecycle(client: PersistClient) -> None:
    w = client.open_writer("s", SCHEMA)
    b = w.batch([(("a", 1), 0, 1)], 0, 1)
    assert isinstance(w.compare_and_append_batch([b], 0, 1), Appended)
    with pytest.raises(InvalidUsage, match="it is appended"):
        w.compare_and_append_batch([b], 1, 1)
    b2 = w.batch([(("a", 1), 1, 1)], 1, 2)
    b2.delete()
    with pytest.raises(InvalidUsage, match="it is deleted"):
        w.compare_and_append_batch([b2], 1, 2)


class InterruptedAfterCommit(MemoryConsensus):
    """Commits, then raises what an interrupt (Ctrl-C) raises as the write returns."""

    armed = False

    def compare_and_set(self, key: str, expected: int | None, new: VersionedData) -> Any:
        result = super().compare_and_set(key, expected, new)
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return result


def second_append_raises(
    consensus: Any, clock: Clock, error: type[BaseException], **config: Any
) -> PersistClient:
    """Shard ``s`` with ``("a", 1)`` at 0, then an append of ``("b", 2)`` at 1 that raises
    ``error`` (``consensus`` armed for it)."""
    settings = PersistConfig(clock=clock, backoff_ms=0.0, **config)
    client = PersistClient(Location(MemoryBlob(), consensus), settings)
    writer = client.open_writer("s", SCHEMA)
    writer.append([(("a", 1), 0, 1)], 0, 1)
    consensus.armed = True
    with pytest.raises(error):
        writer.compare_and_append([(("b", 2), 1, 1)], 1, 2)
    return client


def assert_both_appended(client: PersistClient) -> None:
    """Both appends are in ``s``, and their parts are readable."""
    reader = client.open_leased_reader("s")
    assert rows(reader.snapshot(1)) == [("a", 1, 1), ("b", 2, 1)]
    reader.expire()


def test_an_interrupt_after_the_commit_leaves_the_appended_parts(clock: Clock) -> None:
    """Any error but Indeterminate deleted the staged parts: a Ctrl-C as the commit returned
    left the shard naming parts that were gone, unreadable at every later time."""
    client = second_append_raises(InterruptedAfterCommit(), clock, KeyboardInterrupt)
    assert client.state("s").upper.time == 2
    assert_both_appended(client)


def test_a_closed_shard_stays_readable_at_its_last_time(client: PersistClient) -> None:
    """A reader that moved its since to the empty frontier (a listen past the close) made
    the shard's since empty: no reader could read what the shard held, at any time."""
    writer = client.open_writer("s", SCHEMA)
    writer.append([(("a", 1), 0, 1), (("b", 2), 3, 1)], 0, 5)
    writer.expire()
    client.close_shard("s")
    reader = client.open_leased_reader("s")
    reader.downgrade_since(None)
    assert client.state("s").since.time == 4
    later = client.open_leased_reader("s")
    assert rows(later.snapshot(4)) == [("a", 1, 1), ("b", 2, 1)]
    for r in (reader, later):
        r.expire()


@pytest.mark.parametrize("name", ["_diff_sum", "__diff", "__diff_sum"])
def test_a_column_named_like_the_diffs_sum_is_consolidated(
    client: PersistClient, name: str
) -> None:
    """Arrow names the sum of ``_diff`` ``_diff_sum``: a data column of that name made every
    snapshot of the shard fail with a KeyError."""
    schema = pa.schema([(name, pa.int64())])
    writer = client.open_writer("s", schema)
    writer.append([((1,), 0, 1), ((1,), 0, 1), ((2,), 1, 1), ((2,), 1, -1)], 0, 2)
    reader = client.open_leased_reader("s")
    assert reader.snapshot(1).select([name, "_diff"]).to_pylist() == [{name: 1, "_diff": 2}]
    reader.expire()
    writer.expire()


def test_minus_zero_and_zero_are_one_row(client: PersistClient) -> None:
    """Spark's consolidation takes -0.0 for 0.0 (an upsert's retraction can come back so):
    Arrow's kept them apart, so a snapshot showed a row at -1 beside one at +1."""
    schema = pa.schema([("k", pa.string()), ("x", pa.float64())])
    writer = client.open_writer("s", schema)
    writer.append([(("a", -0.0), 0, 1), (("a", 0.0), 1, -1), (("a", 2.0), 1, 1)], 0, 2)
    reader = client.open_leased_reader("s")
    assert reader.snapshot(1).select(["k", "x", "_diff"]).to_pylist() == [
        {"k": "a", "x": 2.0, "_diff": 1}
    ]
    reader.expire()
    writer.expire()
    # Arrow has no float16 comparison: such a column is left as it is, not a crash.
    halves = pa.table(
        {
            "h": pa.array([0.5, 0.5], pa.float16()),
            "_ts": [1, 1],
            "_diff": [1, 1],
            "_err": pa.nulls(2, pa.string()),
        }
    ).cast(updates_schema(pa.schema([("h", pa.float16())])))
    assert consolidate(halves).column("_diff").to_pylist() == [2]


NAN_OF_0_DIV_0 = struct.unpack(">d", bytes.fromhex("fff8000000000000"))[0]


@pytest.mark.parametrize(
    ("rows", "type_"),
    [
        ([float("nan"), NAN_OF_0_DIV_0], pa.float64()),
        ([{"a": -0.0}, {"a": 0.0}], pa.struct([("a", pa.float64())])),
        ([[-0.0, None], [0.0, None]], pa.list_(pa.float64())),
        (
            [{"b": [NAN_OF_0_DIV_0]}, {"b": [float("nan")]}],
            pa.struct([("b", pa.list_(pa.float32()))]),
        ),
    ],
)
def test_every_nan_and_both_zeros_are_one_value_at_any_depth(rows: list[Any], type_: Any) -> None:
    """Spark groups every NaN as one and -0.0 as 0.0, inside structs and lists too. Arrow
    kept a NaN that 0/0 made (sign bit set) apart from float('nan'), and a nested -0.0
    apart from 0.0: a row at +1 and its retraction at -1 both stayed."""
    table = pa.table(
        {
            "x": pa.array(rows, type_),
            "_ts": [1, 1],
            "_diff": [1, -1],
            "_err": pa.nulls(2, pa.string()),
        }
    ).cast(updates_schema(pa.schema([("x", type_)])))
    assert consolidate(table).num_rows == 0
    assert consolidate(table.slice(1)).column("_diff").to_pylist() == [-1]


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        (pa.schema([("at", pa.timestamp("ns"))]), "no nanosecond timestamps"),
        (pa.schema([("at", pa.timestamp("ns", tz="UTC"))]), "no nanosecond timestamps"),
        (pa.schema([("at", pa.list_(pa.timestamp("ns")))]), "no nanosecond timestamps"),
        (pa.schema([("t", pa.time64("us"))]), "no time of day"),
        (pa.schema([("a", pa.int64()), ("A", pa.int64())]), "differ only in case"),
    ],
)
def test_a_new_shard_takes_only_what_spark_reads_back(
    client: PersistClient, schema: pa.Schema, match: str
) -> None:
    """Such shards were created, and every Spark read of them failed as a corrupt part
    (or COLUMN_ALREADY_EXISTS)."""
    with pytest.raises(InvalidUsage, match=match):
        client.open_writer("s", schema)
    assert "s" not in client.list_shards()


def test_gc_scans_every_retained_version(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GC scanned the first 100,000 retained versions only: a part named only by a later
    one, which a reader still held, read as never referenced and was deleted."""
    import timeshard.persist.gc as gc
    from timeshard.persist._internal.blobio import read_part

    monkeypatch.setattr(gc, "_SCAN_LIMIT", 5)  # the real limit, made small
    writer = client.open_writer("s", SCHEMA)
    idle = client.open_leased_reader("s")  # holds an old version
    for t in range(8):
        writer.append([((str(t), t), t, 1)], t, t + 1)
    other = client.open_writer("s")
    other.append([((f"x{j}", j), 8, 1) for j in range(10)], 8, 9)
    reader = client.open_leased_reader("s")
    parts = reader.snapshot_parts(8)  # this state's parts are the reader's to read
    other.expire()
    client.compact("s")  # the head names other's batch no more
    idle.renew_lease()
    client.gc("s")
    read = [read_part(client.location.blob, p, SCHEMA, client.config) for p in parts]
    assert sum(t.num_rows for t in read) == 18
    for handle in (idle, reader, writer):
        handle.expire()


class LateCommitThenDown(MemoryConsensus):
    """A compare-and-set reported Indeterminate lands just before the retry; then consensus
    cannot be read."""

    def __init__(self) -> None:
        super().__init__()
        self.late: tuple[str, int | None, VersionedData] | None = None
        self.landed = False
        self.armed = False

    def compare_and_set(self, key: str, expected: int | None, new: VersionedData) -> Any:
        if self.armed:
            self.armed = False
            self.late = (key, expected, new)
            raise Indeterminate("the commit may have been sent")
        if self.late is not None and not self.landed:
            self.landed = True
            super().compare_and_set(*self.late)  # the retry now mismatches
        return super().compare_and_set(key, expected, new)

    def head(self, key: str) -> Any:
        if self.landed:
            raise Determinate("consensus is down")
        return super().head(key)


def test_an_append_that_may_have_committed_is_never_determinate(clock: Clock) -> None:
    """After an Indeterminate attempt, a later read that failed raised Determinate, which
    says nothing was appended: the appended batch's parts were deleted."""
    consensus = LateCommitThenDown()
    client = second_append_raises(consensus, clock, Indeterminate, max_attempts=3)
    consensus.landed, consensus.late = False, None  # consensus is back
    assert_both_appended(client)


def test_since_error(client: PersistClient) -> None:
    w, r = client.open("s", SCHEMA)
    w.append([(("a", 1), 0, 1)], 0, 10)
    r.downgrade_since(5)
    with pytest.raises(SinceError, match="as_of 4 is not readable"):
        r.snapshot(4)
    assert rows(r.snapshot(5)) == [("a", 1, 1)]
    with pytest.raises(InvalidUsage, match="not before the upper"):
        r.snapshot(10)
    # A since never regresses.
    assert r.downgrade_since(2) == Frontier(5)


def test_leases_expire(client: PersistClient, clock: Clock) -> None:
    w, r = client.open("s", SCHEMA)
    clock.now += 5000
    other = client.open_writer("s")
    client.gc("s")
    with pytest.raises(LeaseExpired):
        w.append([], 0, 1)
    with pytest.raises(LeaseExpired):
        r.snapshot(0)
    assert isinstance(other.compare_and_append([], 0, 1), Appended)


def test_heartbeat_keeps_lease(client: PersistClient, clock: Clock) -> None:
    w, r = client.open("s", SCHEMA)
    for _ in range(5):
        clock.now += 600
        w.heartbeat()
        r.heartbeat()
        client.gc("s")
    w.append([(("a", 1), 0, 1)], 0, 1)
    assert rows(r.snapshot(0)) == [("a", 1, 1)]


def test_critical_since_fencing(client: PersistClient) -> None:
    w = client.open_writer("s", SCHEMA)
    w.append([], 0, 10)
    gen1 = client.open_critical_since("s", "deploy", "gen-1")
    assert gen1.downgrade_since(3) == Frontier(3)
    gen2 = client.open_critical_since("s", "deploy", "ignored")
    assert gen2.opaque == "gen-1"
    assert gen2.compare_and_downgrade_since("gen-1", "gen-2", 4) == Frontier(4)
    assert gen1.compare_and_downgrade_since("gen-1", "gen-1", 6) == OpaqueMismatch("gen-2")
    with pytest.raises(Fenced, match="gen-2"):
        gen1.downgrade_since(7)
    assert gen2.since == Frontier(4)


def test_a_dropped_critical_reader_fences_its_handles(client: PersistClient) -> None:
    """Another server's DROP removes the reader: a handle of it is fenced, not a KeyError."""
    client.open_writer("s", SCHEMA).append([], 0, 10)
    held = client.open_critical_since("s", "deploy", "gen-1")
    client.drop_critical_since("s", "deploy")
    for read in (lambda: held.since, held.current_opaque, lambda: held.downgrade_since(5)):
        with pytest.raises(Fenced, match="critical reader 'deploy' of shard 's' is gone"):
            read()


def test_listen_sees_updates_then_progress(client: PersistClient) -> None:
    w, r = client.open("s", SCHEMA)
    w.append([(("a", 1), 0, 1)], 0, 2)
    listen = r.listen(0)
    assert listen.poll() == [Progress(Frontier(2))]
    w.append([(("b", 2), 3, 1), (("b", 2), 4, 1)], 2, 5)
    w.compact()
    events = listen.poll()
    assert isinstance(events[0], Updates) and isinstance(events[-1], Progress)
    got = sorted((x["k"], x["_ts"], x["_diff"]) for x in events[0].table.to_pylist())
    assert got == [("b", 3, 1), ("b", 4, 1)]
    assert events[-1] == Progress(Frontier(5))
    assert listen.poll() == []


def test_compaction_consolidates_and_gc_deletes(client: PersistClient) -> None:
    w, r = client.open("s", SCHEMA)
    for t in range(8):
        w.append([(("a", t), t, 1), (("a", t - 1), t, -1)] if t else [(("a", 0), 0, 1)], t, t + 1)
    before = {t: rows(r.snapshot(t)) for t in range(8)}
    r.downgrade_since(6)
    merges = w.compact()
    assert merges > 0
    state = client.state("s")
    assert len(state.batches) < 8
    for t in range(6, 8):
        assert rows(r.snapshot(t)) == before[t]
    keys_before = {m.key for m in client.location.blob.list_keys()}
    # The reads after the merge left the reader's hold on an older state (a hold moves
    # up once it lags gc_interval_versions, or at a heartbeat or a since downgrade):
    # GC keeps what that state names.
    assert client.gc("s").deleted_blobs == 0
    r.heartbeat()  # holds the head: the merged-away parts are garbage now
    report = client.gc("s")
    keys_after = {m.key for m in client.location.blob.list_keys()}
    assert keys_after == client.state("s").referenced_keys()
    assert report.deleted_blobs == len(keys_before - keys_after) > 0
    assert rows(r.snapshot(7)) == before[7]


def test_missing_and_corrupt_parts_are_reported(tmp_path: Path) -> None:
    client = PersistClient(Location(FileBlob(tmp_path), MemoryConsensus()))
    w, r = client.open("s", SCHEMA)
    w.append([(("a", 1), 0, 1)], 0, 1)
    w.append([(("b", 1), 1, 1)], 1, 2)
    first, second = (b.parts[0].key for b in client.state("s").batches)
    (tmp_path / first).write_bytes(b"PAR1 not really parquet")
    with pytest.raises(PartError, match=f"part '{first}' is corrupt"):
        r.snapshot(1)
    (tmp_path / second).unlink()
    with pytest.raises(PartError, match=f"part '{second}' is missing"):
        r.listen(0).poll()


def test_corrupt_consensus_state_is_reported(client: PersistClient) -> None:
    client.open_writer("s", SCHEMA)
    consensus = client.location.consensus
    head = consensus.head("s")
    assert head is not None
    consensus.compare_and_set("s", head.seqno, VersionedData(head.seqno + 1, b"\x00garbage"))
    with pytest.raises(CorruptState, match="shard 's' at seqno"):
        client.open_writer("s")


def test_background_compaction_bounds_state_blob_and_consensus(client: PersistClient) -> None:
    """A writer appending for ever keeps batches, parts and versions bounded.

    The reference is a dict of the live values; the snapshot at every time at
    or past the held since must equal it, whatever the compactor did meanwhile.
    """
    w = client.open_writer("s", SCHEMA, background_compaction=True)
    r = client.open_leased_reader("s")
    model: dict[str, int] = {}
    history: dict[int, list[tuple[str, int, int]]] = {}
    for t in range(300):
        key = f"k{t % 7}"
        updates = [((key, model[key]), t, -1)] if key in model else []
        model[key] = t
        w.append([*updates, ((key, t), t, 1)], t, t + 1)
        history[t] = sorted((k, v, 1) for k, v in model.items())
        r.downgrade_since(max(0, t - 3))
        for seen in range(max(0, t - 3), t + 1):
            assert rows(r.snapshot(seen)) == history[seen]
    assert w.compactor.wait_idle(60)
    assert not w.compactor.errors
    state = client.state("s")
    assert w.compactor.merges > 0 and w.compactor.collections > 1
    assert len(state.batches) <= 12  # geometric sizes: about log2(300) batches
    versions = client.location.consensus.scan("s", 0, 100_000)
    assert len(versions) < 2 * client.config.gc_interval_versions + 10
    listed = {m.key for m in client.location.blob.list_keys()}
    assert len(listed) < 150  # one part per append would be 300
    assert rows(r.snapshot(299)) == history[299]
    w.expire()
    assert not w.compactor._thread.is_alive()


def test_expire_all_tries_every_handle(client: PersistClient, clock: Clock) -> None:
    w, r = client.open("s", SCHEMA)
    gone = client.open_leased_reader("s")
    clock.now += 5_000  # past the leases
    w.heartbeat(), r.heartbeat()
    client.gc("s")  # expires ``gone``

    class Broken:
        def expire(self) -> None:
            raise RuntimeError("consensus down")

    with pytest.raises(RuntimeError, match="consensus down"):
        expire_all([gone, Broken(), w, r])
    state = client.state("s")
    assert state.writers == {} and state.leased_readers == {}


def test_background_compaction_keeps_up_with_a_fast_writer(client: PersistClient) -> None:
    """More appends than one compaction round merges still end in the size order."""
    w = client.open_writer("s", SCHEMA, background_compaction=True)
    for t in range(400):
        w.append([((f"k{t}", t), t, 1)], t, t + 1)
    assert w.compactor.wait_idle(60)
    assert not w.compactor.errors
    assert len(client.state("s").batches) <= 12
    assert client.open_leased_reader("s").snapshot(399).num_rows == 400


def test_tokens_and_opaques_of_the_wrong_type_are_refused_not_written(
    client: PersistClient,
) -> None:
    """A non-string token or opaque raises InvalidUsage naming it, and the shard stays
    readable (it was written into the state, after which no handle could decode it)."""
    w = client.open_writer("s", SCHEMA)
    with pytest.raises(InvalidUsage, match="token 123"):
        w.compare_and_append_batch([], 0, 1, token=123)  # type: ignore[arg-type]
    with pytest.raises(InvalidUsage, match="opaque 7"):
        client.open_critical_since("s", "crit", 7)  # type: ignore[arg-type]
    held = client.open_critical_since("s", "crit", "a")
    with pytest.raises(InvalidUsage, match="opaque None"):
        held.compare_and_downgrade_since("a", None, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidUsage, match="opaque b'a'"):
        held.compare_and_downgrade_since(b"a", "b", 0)  # type: ignore[arg-type]
    assert client.state("s").upper == Frontier(0)
    assert held.current_opaque() == "a"


@pytest.mark.parametrize(
    "field, value",
    [
        ("writer_lease_ms", 6e5),
        ("reader_lease_ms", "900000"),
        ("max_attempts", 0),
        ("heartbeat_interval_ms", -1),
        ("blob_target_part_rows", True),
        ("backoff_ms", "2"),
        ("compaction_enabled", 1),
        ("clock", 5),
    ],
)
def test_a_config_of_the_wrong_type_is_refused(field: str, value: object) -> None:
    with pytest.raises(InvalidUsage, match=re.escape(f"{field} {value!r}")):
        PersistConfig(**{field: value})  # type: ignore[arg-type]


def test_a_clock_of_float_milliseconds_is_refused_and_leaves_the_shard_readable() -> None:
    location = Location(MemoryBlob(), MemoryConsensus())
    floats = PersistConfig(clock=lambda: 1_000_000.5, heartbeat_interval_ms=0)
    with pytest.raises(InvalidUsage, match=r"clock returned 1000000\.5"):
        PersistClient(location, floats).open_writer("s", SCHEMA)
    state = PersistClient(location, PersistConfig(heartbeat_interval_ms=0)).state("s")
    assert state.writers == {}


def test_a_state_that_would_not_decode_is_never_written(client: PersistClient) -> None:
    """The machine's last line of defence: whatever a transition built, a state that
    does not decode is refused (InvalidUsage) before the compare-and-set."""
    from dataclasses import replace

    from timeshard.persist._internal.machine import Machine

    w = client.open_writer("s", SCHEMA)
    machine = Machine("s", client.location.consensus, client.config)

    def bad(s: Any) -> Any:
        writer = replace(s.writers[w.writer_id], most_recent_token=123)
        return replace(s, writers={**s.writers, w.writer_id: writer}), None

    with pytest.raises(InvalidUsage, match="does not decode"):
        machine.apply(bad)
    assert client.state("s").seqno == machine.fetch().seqno
    client.open_leased_reader("s")


def test_the_same_batch_twice_in_one_append_is_refused(client: PersistClient) -> None:
    """Its parts would be referenced twice and its updates counted twice."""
    w, r = client.open("s", SCHEMA)
    b = w.batch([(("a", 1), 0, 1)], 0, 1)
    copy = w.batch_from_transmittable(b.into_transmittable())
    for batches in ([b, b], [b, copy]):
        with pytest.raises(InvalidUsage, match=r"part .*part-00000.parquet.* more than once"):
            w.compare_and_append_batch(batches, 0, 1)
    assert b.status == "staged"
    w.compare_and_append_batch([b], 0, 1)
    assert rows(r.snapshot(0)) == [("a", 1, 1)]


@pytest.mark.parametrize("diffs", [[2**62, 2**62], [-(2**62), -(2**62), -1], [2**63 - 1, 1]])
def test_diffs_that_overflow_int64_are_an_error_not_wrapped(
    client: PersistClient, diffs: list[int]
) -> None:
    """Consolidation sums diffs exactly: a sum beyond int64 raises DiffOverflow (it wrapped
    to a diff of the other sign, and compaction wrote that back)."""
    from timeshard.persist import DiffOverflow

    n = len(diffs)
    table = pa.table(
        {
            "k": ["a"] * n,
            "v": pa.array([1] * n, pa.int64()),
            "_ts": pa.array([0] * n, pa.int64()),
            "_diff": pa.array(diffs, pa.int64()),
            "_err": pa.nulls(n, pa.string()),
        }
    )
    with pytest.raises(DiffOverflow, match=r"\('a', 1\).* at time 0 .*int64"):
        consolidate(table)
    w = client.open_writer("s", SCHEMA)
    for i, d in enumerate(diffs):
        w.append([(("a", 1), i, d)], i, i + 1)
    client.open_critical_since("s", "hold", "x").downgrade_since(n - 1)
    with pytest.raises(DiffOverflow):
        client.compact("s")
    with pytest.raises(DiffOverflow):  # nothing wrapped was written back
        client.open_leased_reader("s").snapshot(n - 1)


def test_large_diffs_that_do_not_overflow_consolidate() -> None:
    table = pa.table(
        {
            "k": ["a", "a", "b"],
            "_ts": pa.array([0, 0, 0], pa.int64()),
            "_diff": pa.array([2**62, -(2**62) + 5, 2**63 - 1], pa.int64()),
            "_err": pa.nulls(3, pa.string()),
        }
    )
    out = consolidate(table).sort_by("k")
    assert out.column("_diff").to_pylist() == [5, 2**63 - 1]


@pytest.mark.parametrize("column", ["_ts", "_diff"])
def test_a_null_time_or_diff_is_invalid_usage_naming_the_column(
    client: PersistClient, column: str
) -> None:
    w = client.open_writer("s", SCHEMA)
    update: list[Any] = [("a", 1), 0, 1]
    update[1 if column == "_ts" else 2] = None
    with pytest.raises(InvalidUsage, match=f"{column} is null in 1 of 1 rows"):
        w.compare_and_append([tuple(update)], 0, 1)
    table = pa.table({"k": ["a", "b"], "v": [1, 2], "_ts": [0, 0], "_diff": [1, 1]})
    index = table.schema.get_field_index(column)
    table = table.set_column(index, column, pa.array([0, None], pa.int64()))
    with pytest.raises(InvalidUsage, match=f"{column} is null in 1 of 2 rows"):
        w.compare_and_append(table, 0, 1)
    assert client.state("s").upper == Frontier(0)
    assert list(client.location.blob.list_keys()) == []


def test_a_writer_named_again_after_its_lease_ran_out_does_not_revive_the_old_one(
    client: PersistClient, clock: Clock
) -> None:
    # A writer opened with a name stages a batch, stalls past its lease and is expired;
    # GC then deletes its staged parts. A new writer opened with the same name must not
    # let the stalled one append the batch whose parts are gone.
    stalled = client.open_writer("s", SCHEMA, writer_id="ingest")
    batch = stalled.batch([(("a", 1), 0, 1)], 0, 1)
    clock.now += 10_000
    assert client.gc("s").deleted_blobs == 1  # GC expires the lease, then deletes the part
    assert stalled.writer_id not in client.state("s").writers
    again = client.open_writer("s", SCHEMA, writer_id="ingest")
    assert again.writer_id != stalled.writer_id and again.writer_id.startswith("ingest")
    with pytest.raises(LeaseExpired):
        stalled.compare_and_append_batch([batch], 0, 1)
    assert client.state("s").upper == Frontier(0)
    assert again.append([(("b", 1), 0, 1)], 0, 1).upper == Frontier(1)
    assert rows(client.open_unleased_reader("s").snapshot(0)) == [("b", 1, 1)]


def test_a_writer_name_too_long_for_its_registration_is_refused_naming_it(
    client: PersistClient,
) -> None:
    with pytest.raises(InvalidUsage, match=re.escape(repr("n" * 200))):
        client.open_writer("s", SCHEMA, writer_id="n" * 200)
