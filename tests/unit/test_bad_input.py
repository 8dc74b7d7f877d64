"""Bad-input corpus, Spark-free part: every bad input gets a typed error or err rows.

Each case damages or misnames something, checks the error (its type, and that
its message names the offending value), then checks that what was durable
before is still readable and unchanged: every other shard, and every earlier
state of the damaged one (snapshot equality at every readable time).

Cases here: damaged Parquet parts (every byte flipped in turn, truncated,
extended, missing), garbage and truncated consensus state (library and CLI),
unknown and invalid shard ids, location URIs and blob keys that point where
they must not, and the FILE source's decoder task (the function Spark tasks
run, called here on Arrow batches) fed malformed lines, invalid UTF-8, type
mismatches, schema drift, an over-long line and a truncated file. The same
source end to end through Spark is in ``tests/integration/test_bad_input_spark.py``.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import sqlite3
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from timeshard.cli.main import app, main
from timeshard.errors import CorruptState, InvalidUsage, PartError
from timeshard.location import (
    FileBlob,
    Location,
    MemoryBlob,
    MemoryConsensus,
    SqliteConsensus,
    open_blob,
    open_consensus,
    open_location,
)
from timeshard.persist import PersistClient
from timeshard.persist._internal.parts import conform, decode_part, encode_part
from timeshard.storage import file_decode, file_read
from timeshard.storage.file_read import _decoder

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
Contents = dict[str, dict[int, list[tuple[Any, ...]]]]


# -- a location with durable data ---------------------------------------------------------


def make_location(root: Path) -> PersistClient:
    """Shard ``s1`` with batches [0, 2) and [2, 3), shard ``s2`` with [0, 1)."""
    client = PersistClient(Location.embedded(root))
    w1 = client.open_writer("s1", SCHEMA)
    w1.append([(("a", 1), 0, 1), (("b", 2), 1, 1)], 0, 2)
    w1.append([(("a", 1), 2, -1), (("c", 3), 2, 1)], 2, 3)
    w1.expire()
    w2 = client.open_writer("s2", SCHEMA)
    w2.append([(("x", 9), 0, 1)], 0, 1)
    w2.expire()
    return client


def contents(client: PersistClient, shards: list[str]) -> Contents:
    """Every readable time's snapshot of ``shards``, rows as ``(*data, _ts, _diff, _err)``.

    Read with unleased readers, which write nothing to consensus.
    """
    out: Contents = {}
    for shard in shards:
        reader = client.open_unleased_reader(shard)
        since, upper = reader.since().time, reader.upper().time
        assert since is not None and upper is not None
        out[shard] = {
            t: sorted(tuple(r.values()) for r in reader.snapshot(t).to_pylist())
            for t in range(since, upper)
        }
    return out


EXPECTED: Contents = {
    "s1": {
        0: [("a", 1, 0, 1, None)],
        1: [("a", 1, 1, 1, None), ("b", 2, 1, 1, None)],
        2: [("b", 2, 2, 1, None), ("c", 3, 2, 1, None)],
    },
    "s2": {0: [("x", 9, 0, 1, None)]},
}


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    client = make_location(tmp_path / "loc")
    assert contents(client, ["s1", "s2"]) == EXPECTED
    return client


def part_path(client: PersistClient, shard: str, batch: int) -> tuple[str, Path]:
    """The key and file of the only part of ``batch`` of ``shard``."""
    [part] = client.state(shard).batches[batch].parts
    blob = client.location.blob
    assert isinstance(blob, FileBlob)
    return part.key, blob.path(part.key)


# -- damaged parts -------------------------------------------------------------------------


def test_every_flipped_byte_of_a_part_raises_part_error(client: PersistClient) -> None:
    """No flipped byte decodes into other data: the recorded SHA-256 catches each one."""
    key, path = part_path(client, "s1", 1)
    good = path.read_bytes()
    reader = client.open_unleased_reader("s1")
    silent = []
    for pos in range(len(good)):
        damaged = bytearray(good)
        damaged[pos] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            reader.snapshot(2)
        except PartError as e:
            assert e.key == key and "corrupt" in str(e), e
            continue
        silent.append(pos)
    assert silent == [], f"flipped bytes at {silent[:10]} were read without an error"
    path.write_bytes(good)
    assert contents(client, ["s1", "s2"]) == EXPECTED


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b[: len(b) // 2], "corrupt"),
        (lambda b: b"", "corrupt"),
        (lambda b: b + b"garbage", "corrupt"),
        (lambda b: b[:-8] + b"\x00" * 8, "corrupt"),
        (None, "missing"),
    ],
    ids=["truncated", "emptied", "extended", "footer-zeroed", "deleted"],
)
def test_damaged_part_is_reported_on_every_read_path(
    client: PersistClient, damage: Callable[[bytes], bytes] | None, reason: str
) -> None:
    key, path = part_path(client, "s1", 1)
    good = path.read_bytes()
    if damage is None:
        path.unlink()
    else:
        path.write_bytes(damage(good))
    leased = client.open_leased_reader("s1")
    unleased = client.open_unleased_reader("s1")
    reads: list[Callable[[], object]] = [
        lambda: leased.snapshot(2),
        lambda: unleased.snapshot(2),
        lambda: client.compact("s1"),
    ]
    for read in reads:
        with pytest.raises(PartError, match=re.escape(f"part '{key}' is {reason}")):
            read()
    # Change times come from the parts' recorded times: the damaged part is not read.
    assert unleased.change_times(0, 3) == [0, 1, 2]
    # Earlier times do not need the damaged part; the other shard is untouched.
    assert [leased.snapshot(t).num_rows for t in (0, 1)] == [1, 2]
    assert contents(client, ["s2"]) == {"s2": EXPECTED["s2"]}
    # GC never deletes a referenced part, damaged or not; repaired, all is as before.
    client.gc("s1")
    if damage is not None:
        assert path.exists()
    path.write_bytes(good)
    assert contents(client, ["s1", "s2"]) == EXPECTED


def test_part_without_digest_fails_typed_or_decodes_valid(tmp_path: Path) -> None:
    """A part with no recorded digest (as Spark tasks write them) still never fails raw.

    Every flipped byte either raises PartError or decodes into arrays that pass
    Arrow's full validation (the value may differ: only the digest can tell).
    """
    table = conform(
        pa.table({"k": ["a", "bb", "ccc"], "v": [1, 2, 3], "_ts": [0, 1, 2], "_diff": [1, 1, 1]}),
        SCHEMA,
    )
    good = encode_part(table)
    raw = []
    for pos in range(len(good)):
        damaged = bytearray(good)
        damaged[pos] ^= 0xFF
        try:
            decoded = decode_part("s/w/b/part-0.parquet", bytes(damaged), SCHEMA)
        except PartError:
            continue
        except Exception as e:
            raw.append((pos, type(e).__name__))
            continue
        decoded.validate(full=True)
    assert raw == [], raw


# -- garbage and truncated consensus state ------------------------------------------------


def _good_doc(client: PersistClient) -> dict[str, Any]:
    head = client.location.consensus.head("s1")
    assert head is not None
    doc: dict[str, Any] = json.loads(head.data)
    return doc


def _edited(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], bytes]:
    def make(doc: dict[str, Any]) -> bytes:
        edit(doc)
        return json.dumps(doc).encode()

    return make


def _set_part_key(doc: dict[str, Any]) -> None:
    doc["batches"][0]["parts"][0]["key"] = "../../etc/passwd"


def _break_contiguity(doc: dict[str, Any]) -> None:
    doc["batches"][1]["desc"]["lower"] = 1  # batch 0 ends at 2


GARBAGE: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "junk-bytes": lambda doc: b"\x00\xff\xfe junk",
    "truncated-json": lambda doc: json.dumps(doc).encode()[:57],
    "empty": lambda doc: b"",
    "json-null": lambda doc: b"null",
    "json-list": lambda doc: b"[1, 2]",
    "schema-not-base64": _edited(lambda d: d.__setitem__("schema", "!!not base64!!")),
    "schema-not-arrow": _edited(lambda d: d.__setitem__("schema", "aGVsbG8gd29ybGQ=")),
    "part-key-escapes": _edited(_set_part_key),
    "batches-not-contiguous": _edited(_break_contiguity),
    "upper-a-string": _edited(lambda d: d.__setitem__("upper", "x")),
    "seqno-a-string": _edited(lambda d: d.__setitem__("seqno", "3")),
    "writers-a-list": _edited(lambda d: d.__setitem__("writers", [])),
    "part-size-negative": _edited(lambda d: d["batches"][0]["parts"][0].__setitem__("size", -1)),
    "ts-min-a-string": _edited(lambda d: d["batches"][0]["parts"][0].__setitem__("ts_min", "a")),
    "other-version": _edited(lambda d: d.__setitem__("version", 99)),
}


def overwrite_head(root: Path, shard: str, data: bytes) -> int:
    """Overwrite the head row of ``shard`` in the SQLite file; return its seqno."""
    with sqlite3.connect(root / "consensus.sqlite") as conn:
        (seqno,) = conn.execute(
            "SELECT max(seqno) FROM consensus WHERE shard = ?", (shard,)
        ).fetchone()
        conn.execute(
            "UPDATE consensus SET data = ? WHERE shard = ? AND seqno = ?", (data, shard, seqno)
        )
    conn.close()
    return int(seqno)


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_state_raises_corrupt_state_and_loses_nothing(
    client: PersistClient, tmp_path: Path, name: str
) -> None:
    root = tmp_path / "loc"
    good = client.location.consensus.head("s1")
    assert good is not None
    keys_before = sorted(m.key for m in client.location.blob.list_keys())
    seqno = overwrite_head(root, "s1", GARBAGE[name](_good_doc(client)))
    # A fresh process would see the same: a new client on the same files.
    fresh = PersistClient(Location.embedded(root))
    message = f"state of shard 's1' at seqno {seqno}"
    calls: list[Callable[[], object]] = [
        lambda: fresh.state("s1"),
        lambda: fresh.open_leased_reader("s1"),
        lambda: fresh.open_unleased_reader("s1"),
        lambda: fresh.open_writer("s1"),
        lambda: fresh.open_writer("s1", SCHEMA),
        lambda: fresh.open_critical_since("s1", "deploy", "0"),
        lambda: fresh.compact("s1"),
        lambda: fresh.gc("s1"),
    ]
    for call in calls:
        with pytest.raises(CorruptState, match=re.escape(message)):
            call()
    # Nothing was written on top of the corrupt head, and GC deleted nothing.
    head = fresh.location.consensus.head("s1")
    assert head is not None and head.seqno == seqno
    assert sorted(m.key for m in fresh.location.blob.list_keys()) == keys_before
    # The other shard is untouched; the earlier versions of s1 are still in consensus.
    assert contents(fresh, ["s2"]) == {"s2": EXPECTED["s2"]}
    assert [v.seqno for v in fresh.location.consensus.scan("s1", 0, 100)][-1] == seqno
    # Put back, the shard reads exactly as before.
    overwrite_head(root, "s1", good.data)
    assert contents(fresh, ["s1", "s2"]) == EXPECTED


def test_cli_reports_corrupt_state_clearly(
    client: PersistClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "loc"
    good = _good_doc(client)
    overwrite_head(root, "s1", json.dumps(good).encode()[:57])
    runner = CliRunner()

    out = runner.invoke(app, ["status", "-l", str(root), "--json"])
    assert out.exit_code == 1, out.output
    rows = {r["object"]: r for r in json.loads(out.stdout)}
    assert rows["s1"]["kind"] == "unreadable" and rows["s1"]["status"] == "CorruptState"
    assert "state of shard 's1' at seqno" in rows["s1"]["error"]
    assert rows["s2"]["kind"] == "shard" and rows["s2"]["write_frontier"] == 1

    out = runner.invoke(app, ["status", "-l", str(root)])
    assert out.exit_code == 1, out.output
    assert "s1: CorruptState: state of shard 's1' at seqno" in " ".join(out.stdout.split())

    out = runner.invoke(app, ["shard", "list", "-l", str(root), "--json"])
    assert out.exit_code == 1, out.output
    listed = {r["shard"]: r for r in json.loads(out.stdout)}
    assert "state of shard 's1' at seqno" in listed["s1"]["error"]
    assert listed["s2"]["upper"] == 1 and listed["s2"]["error"] is None
    out = runner.invoke(app, ["shard", "list", "-l", str(root)])
    assert out.exit_code == 1 and "s1: state of shard 's1'" in " ".join(out.stdout.split())

    # The installed entry point: one line on stderr, exit code 2, no traceback.
    for args in (["shard", "inspect", "s1"], ["shard", "snapshot", "s1"]):
        monkeypatch.setattr(sys, "argv", ["timeshard", *args, "-l", str(root)])
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code == 2
        captured = capsys.readouterr()
        err = " ".join(captured.err.split())
        assert err.startswith("error: state of shard 's1' at seqno"), err
        assert "cannot be decoded: JSONDecodeError" in err and "Traceback" not in err
    assert contents(client, ["s2"]) == {"s2": EXPECTED["s2"]}


# -- unknown and invalid shard ids --------------------------------------------------------

INVALID_IDS: list[object] = ["../x", "", "a/b", "/abs", ".hidden", "a..b", "a b", "x\x00", "é"]
INVALID_IDS += ["x" * 201, "-lead", None, 5]


@pytest.mark.parametrize("shard", INVALID_IDS, ids=repr)
def test_invalid_shard_id_raises_invalid_usage_naming_it(
    client: PersistClient, shard: object
) -> None:
    calls: list[Callable[[Any], object]] = [
        lambda s: client.open(s, SCHEMA),
        lambda s: client.open_writer(s),
        lambda s: client.open_leased_reader(s),
        lambda s: client.open_unleased_reader(s),
        lambda s: client.open_critical_since(s, "deploy", "0"),
        client.state,
        client.compact,
        client.gc,
    ]
    for call in calls:
        with pytest.raises(InvalidUsage) as raised:
            call(shard)
        assert f"invalid shard id {shard!r}" in str(raised.value)
    assert client.list_shards() == ["s1", "s2"]
    assert contents(client, ["s1", "s2"]) == EXPECTED


def test_unknown_shard_raises_invalid_usage_and_creates_nothing(client: PersistClient) -> None:
    calls: list[Callable[[str], object]] = [
        client.open_writer,
        client.open_leased_reader,
        client.open_unleased_reader,
        client.state,
        client.compact,
        client.gc,
        lambda s: client.open_critical_since(s, "deploy", "0"),
    ]
    for call in calls:
        with pytest.raises(InvalidUsage, match="unknown shard id 'never-created': no such shard"):
            call("never-created")
    assert client.list_shards() == ["s1", "s2"]
    for bad_id in ("../w", "w/1"):
        with pytest.raises(InvalidUsage, match=re.escape(f"invalid consensus key {bad_id!r}")):
            client.open_writer("s1", writer_id=bad_id)
        with pytest.raises(InvalidUsage, match=re.escape(f"invalid consensus key {bad_id!r}")):
            client.open_critical_since("s1", bad_id, "0")
    assert contents(client, ["s1", "s2"]) == EXPECTED


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["shard", "inspect", "../x"], "error: invalid shard id '../x'"),
        (["shard", "inspect", "[/x]"], "error: invalid shard id '[/x]'"),
        (["shard", "snapshot", "never-created"], "error: unknown shard id 'never-created'"),
        (
            ["shard", "list", "--blob", "file:///tmp/a/../b", "--consensus", "sqlite:///c.db"],
            "error: invalid path in URI 'file:///tmp/a/../b'",
        ),
        (
            ["status", "--blob", "memory://b", "--consensus", "redis://host/0"],
            "error: unsupported consensus URI 'redis://host/0'",
        ),
    ],
)
def test_cli_names_bad_values_in_one_line(
    client: PersistClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    """The installed entry point: ``error: ...`` on stderr, exit code 2, no traceback."""
    location = [] if "--blob" in args else ["-l", str(tmp_path / "loc")]
    monkeypatch.setattr(sys, "argv", ["timeshard", *args, *location])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith(message) and "Traceback" not in err, err
    assert client.list_shards() == ["s1", "s2"]
    assert contents(client, ["s1", "s2"]) == EXPECTED


# -- locations that point where they must not ---------------------------------------------

BAD_BLOB_URIS = [
    "file:///tmp/x/../y",
    "file:///tmp/x/%2e%2E/y",
    "file:/tmp/../y",
    "FILE:///tmp/a/..",
    "relative/../y",
    "file://elsewhere/tmp/y",
    "file:relative/y",
    "file:///tmp/x?y=1",
    "file:///tmp/x\x00y",
    "file://[::1/y",
    "arrowfs+file:///tmp/x/../y",
    "s3a://bucket/../y",
    "hdfs://namenode/a/%2e%2e/y",
    "arrowfs+nope://y",
    "ftp://host/y",
    "memory://",
    "",
]
BAD_CONSENSUS_URIS = [
    "sqlite:///tmp/x/../y.db",
    "sqlite:///tmp/%2e%2e/y.db",
    "sqlite:rel/../y.db",
    "sqlite://elsewhere/y.db",
    "sqlite:",
    "sqlite::memory:",
    "sqlite://[::1/y.db",
    "/tmp/y.db",
    "redis://host/0",
    "mysql://user@host/db",
    "memory://",
    "",
]


@pytest.mark.parametrize("uri", BAD_BLOB_URIS, ids=repr)
def test_bad_blob_uri_raises_invalid_usage_naming_it(uri: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidUsage) as raised:
        open_blob(uri)
    shown = uri.removeprefix("arrowfs+") if uri.startswith("arrowfs+nope") else uri
    assert repr(shown) in str(raised.value)
    with pytest.raises(InvalidUsage):
        open_location(uri, f"sqlite://{tmp_path / 'c.db'}")
    assert not (tmp_path / "c.db").exists()


@pytest.mark.parametrize("uri", BAD_CONSENSUS_URIS, ids=repr)
def test_bad_consensus_uri_raises_invalid_usage_naming_it(uri: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidUsage) as raised:
        open_consensus(uri)
    assert repr(uri) in str(raised.value)
    with pytest.raises(InvalidUsage):
        open_location(f"file://{tmp_path / 'b'}", uri)


def test_consensus_uri_password_is_masked_when_it_does_not_parse() -> None:
    with pytest.raises(InvalidUsage) as raised:
        open_consensus("postgresql://user:s3cret@[bad/db")
    assert "s3cret" not in str(raised.value) and "[bad/db" in str(raised.value)


UNSAFE_KEYS = ["../outside", "a/../../outside", "/etc/passwd", "a/./b", "a//b", "%2e%2e/x"]
UNSAFE_KEYS += ["a\\..\\b", "x\x00", ""]


@pytest.mark.parametrize("key", UNSAFE_KEYS, ids=repr)
def test_blob_keys_cannot_escape_the_root(key: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep me")
    for blob in (FileBlob(tmp_path / "blob"), MemoryBlob()):
        for call in (blob.get, blob.delete, lambda k: blob.set(k, b"x")):  # noqa: B023
            with pytest.raises(InvalidUsage) as raised:
                call(key)
            assert repr(key) in str(raised.value)
    assert outside.read_bytes() == b"keep me"


def test_symlink_out_of_the_blob_root_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "file").write_bytes(b"secret")
    blob = FileBlob(tmp_path / "blob")
    os.symlink(secret, tmp_path / "blob" / "link")
    for call in (blob.get, blob.delete, lambda k: blob.set(k, b"x")):
        with pytest.raises(CorruptState, match=r"'link/file' passes through 'link'.* outside"):
            call("link/file")
    assert (secret / "file").read_bytes() == b"secret"


@pytest.mark.parametrize("key", ["../s1", "a/b", "", ".x", "x" * 201], ids=repr)
def test_consensus_keys_are_checked(key: str, tmp_path: Path) -> None:
    for consensus in (SqliteConsensus(tmp_path / "c.db"), MemoryConsensus()):
        with pytest.raises(InvalidUsage, match="invalid consensus key"):
            consensus.head(key)
        assert consensus.list_keys() == []


# -- the FILE source decoder (the task function, without Spark) ---------------------------

FILE_SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("ok", pa.bool_()), ("x", pa.float64())]
)


def decode(
    root: Path,
    files: dict[str, bytes],
    fmt: str = "json",
    schema: pa.Schema = FILE_SCHEMA,
    max_line_bytes: int = 1 << 20,
    ranges: dict[str, tuple[int, int]] | None = None,
) -> list[dict[str, Any]]:
    """Write ``files`` under ``root`` and run the decoder task over their ranges."""
    for name, data in files.items():
        (root / name).write_bytes(data)
    ranges = ranges or {name: (0, len(data)) for name, data in files.items()}
    seeds = pa.RecordBatch.from_pylist(
        [{"p": p, "lo": lo, "hi": hi} for p, (lo, hi) in sorted(ranges.items())],
        schema=pa.schema([("p", pa.string()), ("lo", pa.int64()), ("hi", pa.int64())]),
    )
    task = _decoder(str(root), fmt, schema.serialize().to_pybytes(), max_line_bytes)
    return [row for batch in task(iter([seeds])) for row in batch.to_pylist()]


def err_of(row: dict[str, Any]) -> str | None:
    err = row["_err"]
    if err is not None:
        assert all(row[n] is None for n in FILE_SCHEMA.names), row
    return err if err is None else str(err)


JSON_CASES: list[tuple[bytes, tuple[Any, ...] | str]] = [
    (b'{"id": 1, "name": "a", "ok": true, "x": 1.5}', (1, "a", True, 1.5)),
    (b"not json", "JSONDecodeError: Expecting value"),
    (b'{"id": 1, "name": "a"', "JSONDecodeError"),
    (b"[1, 2]", "ValueError: expected a JSON object, got list"),
    (b"", "JSONDecodeError"),
    (b"\xff\xfe{}", "UnicodeDecodeError"),
    (b'{"name": "caf\xc3"}', "UnicodeDecodeError"),
    (b'{"id": "12"}', """column 'id' (int64): expected an integer, got "12\""""),
    (b'{"id": 1.5}', "column 'id' (int64): expected an integer, got 1.5"),
    (b'{"id": 2.0}', "column 'id' (int64): expected an integer, got 2.0"),
    (b'{"id": true}', "column 'id' (int64): expected an integer, got true"),
    (b'{"id": 9223372036854775808}', "column 'id' (int64): 9223372036854775808 is out of range"),
    (b'{"id": -9223372036854775809}', "column 'id' (int64): -9223372036854775809 is out of"),
    (b'{"id": 9223372036854775807}', (9223372036854775807, None, None, None)),
    (b'{"name": 7}', "column 'name' (string): expected a string, got 7"),
    (b'{"name": {"a": 1}}', """column 'name' (string): expected a string, got {"a": 1}"""),
    (b'{"ok": 1}', "column 'ok' (bool): expected true or false, got 1"),
    (b'{"ok": "true"}', """column 'ok' (bool): expected true or false, got "true\""""),
    (b'{"x": "1.5"}', """column 'x' (double): expected a number, got "1.5\""""),
    (b'{"x": true}', "column 'x' (double): expected a number, got true"),
    (b'{"x": 1e400}', "column 'x' (double): the number 1e400 is out of range"),
    (b'{"x": 3}', (None, None, None, 3.0)),
    (b'{"x": NaN}', "nan"),
    # schema drift: extra fields ignored, missing fields null
    (b'{"id": 5, "extra": [1, 2], "name": "e"}', (5, "e", None, None)),
    (b"{}", (None, None, None, None)),
    (b'{"id": null, "name": null}', (None, None, None, None)),
]


def test_json_lines_decode_to_rows_or_err_rows(tmp_path: Path) -> None:
    lines = [line for line, _ in JSON_CASES]
    data = b"\n".join(lines) + b"\n"
    rows = decode(tmp_path, {"a.jsonl": data})
    assert len(rows) == len(JSON_CASES)
    offset = 0
    for row, (line, want) in zip(rows, JSON_CASES, strict=True):
        assert (row["_partition"], row["_offset"]) == ("a.jsonl", offset), row
        offset += len(line) + 1
        err = err_of(row)
        got = tuple(row[n] for n in FILE_SCHEMA.names)
        if isinstance(want, tuple):
            assert err is None and got == want, (line, row)
        elif want == "nan":
            assert err is None and got[3] != got[3], (line, row)
        else:
            assert err is not None and err.startswith(f"a.jsonl@{row['_offset']}: "), (line, err)
            assert want in err, (line, err)


CSV_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("ok", pa.bool_())])
CSV_CASES: list[tuple[bytes, tuple[Any, ...] | str]] = [
    (b"1,a,true", (1, "a", True)),
    (b"2,b", "ValueError: expected 3 fields, got 2"),
    (b"3,c,true,extra", "ValueError: expected 3 fields, got 4"),
    (b"x,d,true", "ValueError: column 'id' (int64): Failed to parse string: 'x'"),
    (b"1.5,e,true", "ValueError: column 'id' (int64)"),
    (b"99999999999999999999,f,true", "ValueError: column 'id' (int64)"),
    (b"4,g,maybe", "ValueError: column 'ok' (bool)"),
    (b'"5,h,true', "ValueError: malformed CSV record: unexpected end of data"),
    (b'"5"x,h,true', "ValueError: malformed CSV record: ',' expected after '\"'"),
    (b"", "ValueError: expected one CSV record, got 0"),
    (b"6,\xff\xfe,true", "UnicodeDecodeError"),
    (b",,", (None, None, None)),
    (b'7,"quoted, comma",false', (7, "quoted, comma", False)),
]


def test_csv_lines_decode_to_rows_or_err_rows(tmp_path: Path) -> None:
    data = b"\n".join(line for line, _ in CSV_CASES) + b"\n"
    rows = decode(tmp_path, {"a.csv": data}, fmt="csv", schema=CSV_SCHEMA)
    assert len(rows) == len(CSV_CASES)
    for row, (line, want) in zip(rows, CSV_CASES, strict=True):
        got = tuple(row[n] for n in CSV_SCHEMA.names)
        if isinstance(want, tuple):
            assert row["_err"] is None and got == want, (line, row)
        else:
            assert row["_err"] is not None and want in row["_err"], (line, row)
            assert got == (None, None, None), row


def test_a_csv_field_longer_than_pythons_csv_field_limit_decodes(tmp_path: Path) -> None:
    """Python's csv reader refuses a field longer than its process-wide limit (131072
    characters by default): the line decodes whatever that limit is."""
    limit = csv.field_size_limit(131072)
    try:
        long = "x" * 200_000
        rows = decode(tmp_path, {"a.csv": f"1,{long},true\n".encode()}, "csv", CSV_SCHEMA)
    finally:
        csv.field_size_limit(limit)
    assert [r["_err"] for r in rows] == [None]
    assert [(r["id"], r["name"]) for r in rows] == [(1, long)]


def test_text_and_bytes_lines_with_invalid_utf8(tmp_path: Path) -> None:
    data = b"good\n\xff\xfe bad\n\n"
    text = decode(tmp_path, {"t.txt": data}, fmt="text", schema=pa.schema([("text", pa.string())]))
    assert [(r["text"], r["_err"] is None) for r in text] == [
        ("good", True),
        (None, False),
        ("", True),
    ]
    assert "t.txt@5: UnicodeDecodeError" in text[1]["_err"]
    raw = decode(tmp_path, {"b.bin": data}, fmt="bytes", schema=pa.schema([("data", pa.binary())]))
    assert [r["data"] for r in raw] == [b"good", b"\xff\xfe bad", b""]


def test_a_fault_while_decoding_fails_the_task_and_is_never_an_err_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad bytes are err rows (JSON nested past the recursion limit too); a MemoryError
    is no property of the line, and a permanent err row for it would lose the line."""
    deep = b'{"id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    rows = decode(tmp_path, {"a.jsonl": deep + b'\n{"id": 1}\n'})
    assert "a.jsonl@0: RecursionError: " in rows[0]["_err"] and rows[1]["id"] == 1
    decoded = file_decode.decode_payload

    def exhausted(line: bytes, fmt: str, schema: pa.Schema) -> dict[str, Any]:
        if line == b'{"id": 2}':
            raise MemoryError
        return decoded(line, fmt, schema)

    monkeypatch.setattr(file_decode, "decode_payload", exhausted)
    with pytest.raises(MemoryError):
        decode(tmp_path, {"b.jsonl": b'{"id": 1}\nnot json\n{"id": 2}\n'})


def test_byte_order_mark_at_the_start_of_a_file_is_skipped(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    rows = decode(tmp_path, {"b.jsonl": bom + b'{"id": 1}\n' + bom + b'{"id": 2}\n'})
    assert rows[0]["id"] == 1 and rows[0]["_err"] is None
    assert rows[1]["id"] is None and "JSONDecodeError" in rows[1]["_err"]  # not at the start


def test_over_long_line_is_an_err_row_and_the_next_lines_decode(tmp_path: Path) -> None:
    long = b'{"id": 2, "name": "' + b"x" * 5000 + b'"}'
    data = b'{"id": 1}\n' + long + b'\n{"id": 3}\n'
    rows = decode(tmp_path, {"a.jsonl": data}, max_line_bytes=4096)
    assert [(r["_offset"], r["id"]) for r in rows] == [(0, 1), (10, None), (11 + len(long), 3)]
    assert rows[1]["_err"] == (
        f"a.jsonl@10: ValueError: the line has {len(long)} bytes, more than max_line_bytes 4096"
    )
    # Exactly at the limit it decodes; a limit of one byte more than the line too.
    rows = decode(tmp_path, {"a.jsonl": data}, max_line_bytes=len(long))
    assert [r["id"] for r in rows] == [1, 2, 3] and rows[1]["name"] == "x" * 5000


def test_over_long_line_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    """A 24 MiB line over a 1 MiB limit: the task never holds much more than a block."""
    with open(tmp_path / "a.jsonl", "wb") as f:
        f.write(b'{"id": 1}\n{"name": "')
        for _ in range(24):
            f.write(b"y" * (1 << 20))
        f.write(b'"}\n{"id": 3}\n')
    decode(tmp_path, {"warm.jsonl": b'{"id": 0}\n'})  # imports what decoding imports, first
    tracemalloc.start()
    try:
        rows = decode(tmp_path, {}, max_line_bytes=1 << 20, ranges=_whole(tmp_path / "a.jsonl"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r["id"] for r in rows] == [1, None, 3]
    assert "more than max_line_bytes 1048576" in rows[1]["_err"]
    assert peak < 6 << 20, peak


def _whole(path: Path) -> dict[str, tuple[int, int]]:
    return {path.name: (0, path.stat().st_size)}


@pytest.mark.parametrize("block", [1, 2, 7, 64, 1 << 20])
def test_lines_split_alike_whatever_the_block_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Lines within, across and longer than blocks; a range starting mid-file."""
    rng = random.Random(block)
    lines = [b"ab" * rng.choice([0, 1, 2, 4, 5, 30]) for _ in range(300)]
    data = b"".join(line + b"\n" for line in lines)
    starts = [sum(len(line) + 1 for line in lines[:i]) for i in range(len(lines))]
    lo = starts[37]
    monkeypatch.setattr(file_read, "_READ_CHUNK", block)
    schema = pa.schema([("data", pa.binary())])
    rows = decode(tmp_path, {"r.bin": data}, "bytes", schema, 9, {"r.bin": (lo, len(data))})
    want = [
        (at, line, None)
        if len(line) <= 9
        else (
            at,
            None,
            f"r.bin@{at}: ValueError: the line has {len(line)} bytes, more than max_line_bytes 9",
        )
        for at, line in zip(starts[37:], lines[37:], strict=True)
    ]
    assert [(r["_offset"], r["data"], r["_err"]) for r in rows] == want


def test_many_lines_come_out_in_bounded_batches(tmp_path: Path) -> None:
    data = b"".join(b'{"id": %d}\n' % i for i in range(10_000))
    (tmp_path / "a.jsonl").write_bytes(data)
    seeds = pa.RecordBatch.from_pylist([{"p": "a.jsonl", "lo": 0, "hi": len(data)}])
    task = _decoder(str(tmp_path), "json", FILE_SCHEMA.serialize().to_pybytes(), 1 << 20)
    batches = list(task(iter([seeds])))
    assert len(batches) == 3 and max(b.num_rows for b in batches) == 4096
    assert [r["id"] for b in batches for r in b.to_pylist()] == list(range(10_000))


def test_a_truncated_file_fails_the_read_instead_of_skipping(tmp_path: Path) -> None:
    data = b'{"id": 1}\n{"id": 2}\n'
    with pytest.raises(
        InvalidUsage, match=re.escape("'a.jsonl' ends at byte 15, inside the line at byte 10")
    ):
        decode(tmp_path, {"a.jsonl": data[:15]}, ranges={"a.jsonl": (0, len(data))})
    with pytest.raises(InvalidUsage, match=re.escape("'gone.jsonl' is gone")):
        decode(tmp_path, {}, ranges={"gone.jsonl": (0, 10)})
    assert [r["id"] for r in decode(tmp_path, {"a.jsonl": data})] == [1, 2]
