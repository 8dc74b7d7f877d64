"""Bad-input corpus, Spark part: FILE sources fed bad lines, damaged parts, bad shard ids.

Every case ingests or reads through the shared local session and checks three
things: the bad input gets err rows or a typed error naming it; every snapshot
that was durable before it is unchanged afterwards (snapshot equality at
every earlier time); and the pipeline keeps going (the lines after the bad
ones are ingested, exactly once, across a restart).

Semantics decided here (see ``timeshard.storage.file_source``):

* a line that does not decode is an err row ``<file>@<offset>: ...``; the
  declared schema is the contract (extra JSON fields are ignored, missing ones
  are null, a value of another type is an err row);
* a line longer than ``max_line_bytes`` (default 64 MiB) is an err row, read
  past in 1 MiB steps; a longer limit decodes it;
* UPSERT over a FILE source whose key field is null or missing: the null key is
  one key, compared null-safely as ``upsert_spark`` does (a later null-key
  record replaces it, a null-key record with null values deletes it).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from tests.integration.spark_checks import expect_part_error

from timeshard.errors import InvalidUsage
from timeshard.location import FileBlob, Location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.spark import snapshot_df, typed_errors
from timeshard.storage.file_source import FileSource
from timeshard.storage.ingest import Ingestion

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
Row = tuple[Any, ...]
BIG = 100 << 20  # the 100 MB line's payload


# -- helpers --------------------------------------------------------------------------------


class Pipeline:
    """A FILE source ingested into ``shard`` with a counting clock; restartable."""

    def __init__(
        self,
        spark: SparkSession,
        root: Path,
        source: Callable[[], FileSource],
        config: PersistConfig | None = None,
    ):
        self.spark = spark
        self.client = PersistClient(Location.embedded(root), config)
        self.source = source
        self.clock = itertools.count(1)
        self.kwargs: dict[str, Any] = {}
        self.ingestion: Ingestion | None = None

    def start(self, **kwargs: Any) -> Pipeline:
        self.kwargs = kwargs
        self.restart()
        # The tests read every time since the start: hold the output's since there
        # (an UPSERT output's own hold moves along with its upper).
        self.hold = self.client.open_leased_reader(self.shard)
        return self

    def restart(self) -> None:
        self.ingestion = Ingestion(
            self.spark, self.client, self.source(), clock=lambda: next(self.clock), **self.kwargs
        )

    def step(self) -> int:
        """One tick; the latest readable time of the output afterwards."""
        assert self.ingestion is not None
        self.ingestion.step()
        upper = self.client.state(self.shard).upper.time
        assert upper is not None
        return upper - 1

    @property
    def shard(self) -> str:
        return self.source().name

    def rows(self, as_of: int, shard: str | None = None) -> list[Row]:
        """The snapshot at ``as_of``: ``(*data, _diff, _err)`` sorted (pyarrow path)."""
        reader = self.client.open_unleased_reader(shard or self.shard)
        table = reader.snapshot(as_of).drop_columns(["_ts"])
        return sorted((tuple(r.values()) for r in table.to_pylist()), key=order)

    def history(self, upto: int) -> dict[int, list[Row]]:
        """Every readable time's snapshot up to ``upto``."""
        since = self.client.state(self.shard).since.time
        assert since is not None
        return {t: self.rows(t) for t in range(since, upto + 1)}


def order(row: Row) -> list[tuple[bool, Any]]:
    """A sort key for rows with nulls: nulls last in each column."""
    return [(v is None, 0 if v is None else v) for v in row]


def errs(rows: list[Row]) -> list[str]:
    return sorted(r[-1] for r in rows if r[-1] is not None)


def oks(rows: list[Row]) -> list[Row]:
    return sorted((r[:-2] for r in rows if r[-1] is None), key=order)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


# -- malformed lines, invalid UTF-8, type mismatches, schema drift -------------------------


def test_json_source_bad_lines_and_drift(spark: SparkSession, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    a = src / "a.jsonl"
    a.write_bytes(b'{"id": 1, "name": "one"}\n{"id": 2, "name": "two"}\n')
    p = Pipeline(spark, tmp_path / "loc", lambda: FileSource("events", src, "json", SCHEMA))
    t1 = p.start().step()
    durable = p.history(t1)
    assert oks(p.rows(t1)) == [(1, "one"), (2, "two")] and errs(p.rows(t1)) == []

    bad = [
        b"{not json",  # malformed
        b'{"id": 3, "name": "thr\xffee"}',  # invalid UTF-8
        b'{"id": "4", "name": "four"}',  # a string where int64 is declared
        b'{"id": 5.5, "name": "five"}',  # a fraction where int64 is declared
        b'{"id": 99999999999999999999, "name": "big"}',  # out of range for int64
        b'{"id": 6, "name": ["a"]}',  # a list where a string is declared
        b'["not", "an", "object"]',
    ]
    offset = a.stat().st_size
    append(a, b"\n".join(bad) + b'\n{"id": 7, "name": "seven"}\n')
    # New files drift from the schema: extra fields, missing fields, a field changing type.
    (src / "b.jsonl").write_bytes(b'{"id": 8, "name": "eight", "extra": {"x": 1}}\n{"id": 9}\n')
    (src / "c.jsonl").write_bytes(b'{"id": 10, "name": 10}\n{"id": 11, "name": "eleven"}\n')
    p.restart()  # a restart in between changes nothing
    t2 = p.step()
    assert p.history(t1) == durable
    rows = p.rows(t2)
    assert oks(rows) == [
        (1, "one"),
        (2, "two"),
        (7, "seven"),
        (8, "eight"),
        (9, None),
        (11, "eleven"),
    ]
    offsets = [offset]
    for line in bad[:-1]:
        offsets.append(offsets[-1] + len(line) + 1)
    want = [
        f"a.jsonl@{offsets[0]}: JSONDecodeError: ",
        f"a.jsonl@{offsets[1]}: UnicodeDecodeError: ",
        f"a.jsonl@{offsets[2]}: ValueError: column 'id' (int64): expected an integer, got \"4\"",
        f"a.jsonl@{offsets[3]}: ValueError: column 'id' (int64): expected an integer, got 5.5",
        f"a.jsonl@{offsets[4]}: ValueError: column 'id' (int64): 99999999999999999999 is out",
        f"a.jsonl@{offsets[5]}: ValueError: column 'name' (string): expected a string, got [\"a\"]",
        f"a.jsonl@{offsets[6]}: ValueError: expected a JSON object, got list",
        "c.jsonl@0: ValueError: column 'name' (string): expected a string, got 10",
    ]
    got = errs(rows)
    assert len(got) == len(want), got
    for prefix in want:
        assert sum(e.startswith(prefix) for e in got) == 1, (prefix, got)
    assert all(r[:-2] == (None, None) for r in rows if r[-1] is not None)
    assert all(r[-2] == 1 for r in rows)

    # The source keeps going after the bad lines: later lines, exactly once.
    durable = p.history(t2)
    append(a, b'{"id": 12, "name": "twelve"}\n')
    t3 = p.step()
    assert p.history(t2) == durable
    assert oks(p.rows(t3)) == [*oks(rows), (12, "twelve")]
    assert errs(p.rows(t3)) == got


def test_csv_source_bad_lines(spark: SparkSession, tmp_path: Path) -> None:
    f = tmp_path / "data.csv"
    f.write_bytes(b"1,alpha\n")
    p = Pipeline(spark, tmp_path / "loc", lambda: FileSource("csvsrc", f, "csv", SCHEMA))
    t1 = p.start().step()
    durable = p.history(t1)
    bad = {
        b"2": "ValueError: expected 2 fields, got 1",
        b"x,beta": "ValueError: column 'id' (int64): Failed to parse string: 'x' as a scalar "
        "of type int64",
        b'3,"unterminated': "ValueError: malformed CSV record: unexpected end of data",
        b"4,g\xffmma": "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 3: "
        "invalid start byte",
        b"5,delta,extra": "ValueError: expected 2 fields, got 3",
    }
    offset, want = f.stat().st_size, []
    for line, error in bad.items():
        want.append(f"data.csv@{offset}: {error}")
        offset += len(line) + 1
    append(f, b"".join(line + b"\n" for line in bad) + b"6,epsilon\n")
    t2 = p.step()
    assert p.history(t1) == durable
    rows = p.rows(t2)
    assert oks(rows) == [(1, "alpha"), (6, "epsilon")]
    assert errs(rows) == sorted(want)


# -- a 100 MB line --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_line_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with one file: a good line, a 100 MB JSON line, a good line. Written once."""
    root = tmp_path_factory.mktemp("big-line")
    with open(root / "big.jsonl", "wb") as f:
        f.write(b'{"id": 1, "name": "before"}\n{"id": 2, "name": "')
        chunk = b"x" * (1 << 20)
        for _ in range(BIG >> 20):
            f.write(chunk)
        f.write(b'"}\n{"id": 3, "name": "after"}\n')
    return root


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (from the parent pids in ``/proc/<pid>/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _rss_mb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _is_python_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read()
    except OSError:
        return False
    return b"pyspark.daemon" in command or b"pyspark.worker" in command


class PythonWorkerMemory:
    """How much Spark's Python workers grew (MB of resident memory) while the block ran.

    Samples every 20 ms the processes below this one whose command line is a
    PySpark daemon or worker (the executors' Python, where lines are decoded),
    and keeps the largest growth of one worker over its resident size when it
    was first seen. Growth, not size: workers are reused across tests and may
    keep memory their allocator has not returned yet.
    """

    def __init__(self) -> None:
        self.seen = False
        self.growth_mb = 0
        self._first: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in _descendants(os.getpid()):
                if not _is_python_worker(pid):
                    continue
                rss = _rss_mb(pid)
                first = self._first.setdefault(pid, rss)
                self.seen = True
                self.growth_mb = max(self.growth_mb, rss - first)
            self._stop.wait(0.02)

    def __enter__(self) -> PythonWorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_hundred_megabyte_line_is_an_err_row_within_bounded_memory(
    spark: SparkSession, tmp_path: Path, big_line_dir: Path
) -> None:
    p = Pipeline(spark, tmp_path / "loc", lambda: FileSource("big", big_line_dir, "json", SCHEMA))
    p.start()
    with PythonWorkerMemory() as memory:
        t = p.step()
    rows = p.rows(t)
    assert oks(rows) == [(1, "before"), (3, "after")]
    line = BIG + len(b'{"id": 2, "name": ""}')
    assert errs(rows) == [
        f"big.jsonl@28: ValueError: the line has {line} bytes, more than max_line_bytes 67108864"
    ]
    # The task measured the line in 1 MiB steps: no worker came near holding it.
    assert memory.seen and memory.growth_mb < 200, memory.growth_mb


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_hundred_megabyte_line_decodes_under_a_larger_limit(
    spark: SparkSession, tmp_path: Path, big_line_dir: Path
) -> None:
    def source() -> FileSource:
        return FileSource("big", big_line_dir, "json", SCHEMA, max_line_bytes=BIG + 1024)

    p = Pipeline(spark, tmp_path / "loc", source)
    p.start()
    with PythonWorkerMemory() as memory:
        t = p.step()
    reader = p.client.open_unleased_reader("big")
    table = reader.snapshot(t)
    assert table.column("_err").null_count == 3
    by_id = {r: i for i, r in enumerate(table.column("id").to_pylist())}
    names = table.column("name")
    assert names[by_id[1]].as_py() == "before" and names[by_id[3]].as_py() == "after"
    big = names[by_id[2]].as_py()
    assert len(big) == BIG and big.count("x") == BIG
    # Decoding holds the line a few times over (bytes, text, parsed), not more.
    assert memory.seen and memory.growth_mb < 1536, memory.growth_mb


# -- null keys under UPSERT -----------------------------------------------------------------

KV = pa.schema([("k", pa.string()), ("v", pa.int64())])


def upsert_pipeline(spark: SparkSession, root: Path, src: Path) -> Pipeline:
    return Pipeline(spark, root, lambda: FileSource("kv", src, "json", KV)).start(
        envelope="upsert", key_columns=["k"]
    )


def test_upsert_null_key_is_one_key(spark: SparkSession, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    f = src / "a.jsonl"
    f.write_bytes(b'{"k": "a", "v": 1}\n{"k": null, "v": 2}\n')
    p = upsert_pipeline(spark, tmp_path / "loc", src)
    steps = [
        (b"", [("a", 1), (None, 2)]),
        (b'{"v": 3}\n', [("a", 1), (None, 3)]),  # a missing key is the null key
        (b'{"k": "b", "v": 4}\n{"k": null, "v": 5}\n', [("a", 1), ("b", 4), (None, 5)]),
        (b'{"k": null}\n', [("a", 1), ("b", 4)]),  # null values: a delete of the null key
        (b'{"k": null, "v": 6}\n{"k": "a", "v": 7}\n', [("a", 7), ("b", 4), (None, 6)]),
    ]
    durable: dict[int, list[Row]] = {}
    for i, (data, want) in enumerate(steps):
        append(f, data)
        if i == len(steps) - 1:
            p.restart()  # the feedback state is rehydrated from the shard
        t = p.step()
        rows = p.rows(t)
        assert oks(rows) == sorted(want, key=order) and errs(rows) == [], (data, rows)
        assert all(r[-2] == 1 for r in rows)
        if durable:
            assert p.history(max(durable)) == durable
        durable = p.history(t)


def test_upsert_decode_errors_are_kept(spark: SparkSession, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    f = src / "a.jsonl"
    f.write_bytes(b'{"k": "a", "v": 1}\n{"k": null, "v": 2}\n')
    p = upsert_pipeline(spark, tmp_path / "loc", src)
    p.step()
    append(f, b"garbage one\n")
    p.step()
    append(f, b'garbage two\n{"k": null, "v": 4}\n')
    rows = p.rows(p.step())
    assert oks(rows) == [("a", 1), (None, 4)]
    assert [e.split(":")[0] for e in errs(rows)] == ["a.jsonl@39", "a.jsonl@51"]


# -- damaged parts written by Spark tasks ---------------------------------------------------


def test_damaged_spark_part_is_reported_and_ingestion_goes_on(
    spark: SparkSession, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    f = src / "a.jsonl"
    f.write_bytes(b'{"id": 1, "name": "one"}\n')
    # The damaged part must stay in the shard: no background merge may replace it.
    still = PersistConfig(compaction_enabled=False)
    p = Pipeline(spark, tmp_path / "loc", lambda: FileSource("events", src, "json", SCHEMA), still)
    t1 = p.start().step()
    append(f, b'{"id": 2, "name": "two"}\n')
    t2 = p.step()
    other = p.client.open_writer("other", SCHEMA)
    other.append([((7, "seven"), 0, 1)], 0, 1)
    durable, durable_other = p.history(t2), p.rows(0, "other")

    state = p.client.state("events")
    [part] = [q for b in state.batches for q in b.parts if q.ts_min == t2]
    blob = p.client.location.blob
    assert isinstance(blob, FileBlob)
    path = blob.path(part.key)
    good = path.read_bytes()
    reader = p.client.open_leased_reader("events")

    def spark_read() -> Any:
        return snapshot_df(spark, reader, t2).collect()

    path.write_bytes(good[: len(good) // 2])  # truncated: the driver's size check
    expect_part_error(part.key, "corrupt", spark_read)
    expect_part_error(part.key, "corrupt", lambda: reader.snapshot(t2))
    damaged = bytearray(good)
    damaged[-4:] = b"JUNK"  # same size, no Parquet magic: the tasks' reader
    path.write_bytes(bytes(damaged))
    expect_part_error(part.key, "corrupt", spark_read)
    expect_part_error(part.key, "corrupt", lambda: reader.snapshot(t2))

    # Earlier times and other shards do not need the part: unchanged, on both paths.
    assert p.history(t1) == {t: durable[t] for t in range(t1 + 1)}
    with typed_errors():
        assert snapshot_df(spark, reader, t1).count() == 1
    assert p.rows(0, "other") == durable_other
    # The ingestion (NONE envelope) never reads its output: it goes on.
    append(f, b'{"id": 3, "name": "three"}\n')
    t3 = p.step()
    path.write_bytes(good)
    assert p.history(t2) == durable
    assert oks(p.rows(t3)) == [(1, "one"), (2, "two"), (3, "three")]


# -- unknown and invalid shard ids through the data source ----------------------------------


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        ("never-created", "unknown shard id 'never-created'"),
        ("../x", "invalid shard id '../x'"),
        ("a/b", "invalid shard id 'a/b'"),
    ],
)
def test_data_source_names_a_bad_shard_id(
    spark: SparkSession, tmp_path: Path, shard: str, message: str
) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("real", SCHEMA).append([((1, "one"), 0, 1)], 0, 1)
    with pytest.raises(InvalidUsage, match=message), typed_errors():
        spark.read.format("timeshard").option("location", str(tmp_path / "loc")).option(
            "shard", shard
        ).load().collect()
    assert client.list_shards() == ["real"]
    assert client.open_unleased_reader("real").snapshot(0).to_pylist() == [
        {"id": 1, "name": "one", "_ts": 0, "_diff": 1, "_err": None}
    ]
