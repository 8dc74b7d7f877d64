"""COPY FROM through Spark: formats, directories and globs, all or nothing, err rows,
concurrent writers, a model check, and the ``timeshard copy`` command."""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from timeshard.cli.main import app, main
from timeshard.errors import InvalidUsage, UpperMismatch
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import JobCounter
from timeshard.storage import CopyError, copy_files

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
BEFORE = [(("a", 1), 0, 1), (("b", 2), 1, 1), (("a", 1), 2, -1)]  # at 2: b only


def make_collection(root: Path) -> PersistClient:
    """The collection ``orders`` with ``BEFORE`` in it, upper 3."""
    client = PersistClient(Location.embedded(root))
    writer = client.open_writer("orders", SCHEMA)
    writer.append(BEFORE, 0, 3)
    writer.expire()
    return client


def snapshot(client: PersistClient, t: int, shard: str = "orders") -> Counter[tuple[Any, ...]]:
    """The collection at ``t`` as a multiset of ``(k, v, _err)``."""
    reader = client.open_leased_reader(shard)
    try:
        rows = reader.snapshot(t).to_pylist()
    finally:
        reader.expire()
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        out[(r["k"], r["v"], r["_err"])] += r["_diff"]
    return +out


def upper(client: PersistClient) -> int | None:
    return client.state("orders").upper.time


def stray_parts(client: PersistClient) -> list[str]:
    """Blob files under the collection that its state does not reference."""
    referenced = client.state("orders").referenced_keys()
    listed = [m.key for m in client.location.blob.list_keys("orders/")]
    return [k for k in listed if k not in referenced]


def rows(*pairs: tuple[str, int | None]) -> Counter[tuple[Any, ...]]:
    return Counter((k, v, None) for k, v in pairs)


def test_csv_loads_at_the_upper_in_one_job(spark: SparkSession, tmp_path: Path) -> None:
    client = make_collection(tmp_path / "loc")
    f = tmp_path / "in.csv"
    f.write_text("\ufeffv,k\r\n10,x\r\n\r\n20,y\r\n,z\r\n")
    with JobCounter(spark) as jobs:
        report = copy_files(spark, client, str(f), "orders", format="csv")
    assert jobs.count == 1
    assert (report.time, report.upper, report.rows, report.err_rows) == (3, 4, 3, 0)
    assert (report.files, report.attempts, upper(client)) == (1, 1, 4)
    assert snapshot(client, 2) == rows(("b", 2))
    assert snapshot(client, 3) == rows(("b", 2), ("x", 10), ("y", 20), ("z", None))
    assert report.line() == "COPY 3 rows from 1 file into 'orders' at time 3"


def test_a_directory_of_csv_without_headers(spark: SparkSession, tmp_path: Path) -> None:
    client = make_collection(tmp_path / "loc")
    d = tmp_path / "in"
    (d / "2024").mkdir(parents=True)
    (d / "a.csv").write_text("x,1\ny,2\n")
    (d / "2024" / "b.csv").write_text("z,3\n")
    (d / "_SUCCESS").write_text("")
    (d / ".a.csv.crc").write_text("garbage, not,csv\n")
    report = copy_files(spark, client, str(d), "orders", format="csv", header=False)
    assert (report.rows, report.files) == (3, 2)
    assert snapshot(client, 3) == rows(("b", 2), ("x", 1), ("y", 2), ("z", 3))
    assert stray_parts(client) == []


def test_a_glob_of_json_lines(spark: SparkSession, tmp_path: Path) -> None:
    client = make_collection(tmp_path / "loc")
    d = tmp_path / "in"
    d.mkdir()
    (d / "p1.json").write_text('{"k": "x", "v": 1}\n{"v": 2, "k": "y"}\n')
    (d / "p2.json").write_text('{"k": "z"}\n')
    (d / "other.csv").write_text("not json\n")
    report = copy_files(spark, client, str(d / "p*.json"), "orders", format="json", at=10)
    assert (report.time, report.upper, report.rows, report.files) == (10, 11, 3, 2)
    assert snapshot(client, 9) == rows(("b", 2))
    assert snapshot(client, 10) == rows(("b", 2), ("x", 1), ("y", 2), ("z", None))


def test_parquet_files_with_their_own_column_order(spark: SparkSession, tmp_path: Path) -> None:
    client = make_collection(tmp_path / "loc")
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"v": pa.array([1, 2], pa.int32()), "k": ["x", "y"]}), d / "a.parquet")
    pq.write_table(pa.table({"k": ["z"], "v": pa.array([3], pa.int64())}), d / "b.parquet")
    report = copy_files(spark, client, str(d), "orders", format="parquet")
    assert (report.rows, report.time) == (3, 3)
    assert snapshot(client, 3) == rows(("b", 2), ("x", 1), ("y", 2), ("z", 3))
    pq.write_table(pa.table({"k": ["w"], "v": [1.5]}), d / "c.parquet")
    with pytest.raises(InvalidUsage, match=r"c.parquet, column 'v' is double"):
        copy_files(spark, client, str(d), "orders", format="parquet")
    assert upper(client) == 4 and stray_parts(client) == []


def bad_files(d: Path) -> tuple[Path, Path]:
    """Two CSV files with bad lines: 1.csv:3, 1.csv:5, 2.csv:2, 2.csv:4."""
    d.mkdir()
    first, second = d / "1.csv", d / "2.csv"
    first.write_text("k,v\nx,1\ny,one\nz,3\nw,4,5\n")
    second.write_text('k,v\n"q,6\nr,7\ns,\n')
    return first, second


def test_bad_rows_fail_the_whole_copy(spark: SparkSession, tmp_path: Path) -> None:
    client = make_collection(tmp_path / "loc")
    first, second = bad_files(tmp_path / "in")
    before = client.state("orders")
    with pytest.raises(CopyError) as e:
        copy_files(spark, client, str(tmp_path / "in"), "orders", format="csv", not_null=["v"])
    error = e.value
    assert [(r.file, r.line) for r in error.rows] == [
        (str(first), 3),
        (str(first), 5),
        (str(second), 2),
        (str(second), 4),
    ]
    assert error.count == 4 and error.exact
    message = str(error)
    assert f"{first}:3: ValueError: column 'v' (int64)" in message
    assert f"{second}:4: ValueError: columns ['v'] are null" in message
    assert "\n" not in message and "wrote nothing: 4 bad rows" in message
    after = client.state("orders")
    assert after.upper == before.upper and after.batches == before.batches
    assert snapshot(client, 2) == rows(("b", 2))
    assert stray_parts(client) == []


def test_bad_json_rows_fail_and_name_their_lines(spark: SparkSession, tmp_path: Path) -> None:
    client = make_collection(tmp_path / "loc")
    f = tmp_path / "in.json"
    f.write_text('{"k": "x", "v": 1}\n{"k": "y", "v": 1.5}\n{"k": "z", "amount": 3}\n{oops\n')
    with pytest.raises(CopyError) as e:
        copy_files(spark, client, str(f), "orders", format="json")
    assert [r.line for r in e.value.rows] == [2, 3, 4]
    assert "unknown columns ['amount']" in str(e.value) and f"{f}:4: JSONDecodeError" in str(
        e.value
    )
    assert upper(client) == 3 and stray_parts(client) == []


def test_err_rows_mode_loads_bad_rows_as_err_rows(spark: SparkSession, tmp_path: Path) -> None:
    client = make_collection(tmp_path / "loc")
    first, second = bad_files(tmp_path / "in")
    report = copy_files(
        spark, client, str(tmp_path / "in"), "orders", format="csv", on_error="err_rows"
    )
    assert (report.rows, report.err_rows, report.time) == (7, 3, 3)
    assert report.line().startswith("COPY 7 rows (3 err rows) from 2 files")
    snap = snapshot(client, 3)
    assert +Counter({k: n for k, n in snap.items() if k[2] is None}) == rows(
        ("b", 2), ("x", 1), ("z", 3), ("r", 7), ("s", None)
    )
    errs = sorted(k[2] for k in snap if k[2] is not None)
    assert [e.split(": ")[0] for e in errs] == [f"{first}:3", f"{first}:5", f"{second}:2"]
    assert all(k[0] is None and k[1] is None for k in snap if k[2] is not None)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_large_file_split_over_tasks_loads_as_the_whole_file(
    spark: SparkSession, tmp_path: Path, fmt: str
) -> None:
    """Pieces of about 512 bytes: one job counts their newlines, one loads them; rows, err rows
    and their line numbers are those of the unsplit file, a line longer than a piece included."""
    rng = random.Random(7)
    lines = ["k,v"] if fmt == "csv" else []
    for i in range(300):
        key = f"k{i}" + ("x" * 600 if i % 97 == 5 else "")  # a line longer than a piece
        value = "bad" if i % 41 == 3 else str(rng.randint(-9, 9))
        if fmt == "csv":
            lines.append(f"{key},{value}" if i % 53 else "")  # blank lines too
        else:
            lines.append(json.dumps({"k": key, "v": value if value == "bad" else int(value)}))
    f = tmp_path / f"in.{fmt}"
    f.write_text("\r\n".join(lines))  # CR LF, and no newline after the last line
    results = []
    for split in (1 << 30, 512):
        client = make_collection(tmp_path / f"loc-{split}")
        with JobCounter(spark) as jobs:
            report = copy_files(
                spark, client, str(f), "orders", format=fmt, on_error="err_rows", split_bytes=split
            )
        results.append((jobs.count, report.rows, report.err_rows, snapshot(client, 3)))
    (whole_jobs, *whole), (split_jobs, *pieces) = results
    assert (whole_jobs, split_jobs) == (1, 2)
    assert pieces == whole
    bad_lines = sorted(int(k[2].split(": ")[0].rsplit(":", 1)[1]) for k in whole[2] if k[2])
    assert bad_lines[0] == (2 + 3 if fmt == "csv" else 1 + 3)  # i = 3, after the csv header
    with pytest.raises(CopyError) as failed:
        copy_files(
            spark, make_collection(tmp_path / "fail"), str(f), "orders", format=fmt, split_bytes=512
        )
    assert [b.line for b in failed.value.rows] == bad_lines[:5]


class AppendWhenAJobRuns(threading.Thread):
    """Appends ``(k, 0)`` at the upper ``u`` as ``[u, to or u + 1)`` once a Spark job is
    running (its writer registered beforehand, so that it is quick); ``join`` re-raises."""

    def __init__(
        self, spark: SparkSession, client: PersistClient, k: str, to: int | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.tracker = spark.sparkContext.statusTracker()
        self.writer = client.open_writer("orders")
        self.k, self.to = k, to
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 60
            while not self.tracker.getActiveJobsIds():
                assert time.monotonic() < deadline, "no Spark job ran"
                time.sleep(0.002)
            lower = self.writer.fetch_recent_upper().time
            assert lower is not None
            self.writer.append([((self.k, 0), lower, 1)], lower, self.to or lower + 1)
            self.writer.expire()
        except BaseException as e:
            self.error = e

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error


def test_a_moved_upper_reruns_the_copy_at_the_new_upper_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = make_collection(tmp_path / "loc")
    f = tmp_path / "in.csv"
    f.write_text("k,v\nx,1\ny,2\n")
    other = AppendWhenAJobRuns(spark, client, "other")
    with JobCounter(spark) as jobs:
        report = copy_files(spark, client, str(f), "orders", format="csv")
    other.join(5)
    assert jobs.count == 2 and report.attempts == 2
    assert (report.time, upper(client)) == (4, 5)  # the other writer took [3, 4)
    assert snapshot(client, 3) == rows(("b", 2), ("other", 0))
    assert snapshot(client, 4) == rows(("b", 2), ("other", 0), ("x", 1), ("y", 2))
    assert stray_parts(client) == []


def test_a_moved_upper_short_of_at_takes_the_same_parts(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = make_collection(tmp_path / "loc")
    f = tmp_path / "in.csv"
    f.write_text("k,v\nx,1\n")
    other = AppendWhenAJobRuns(spark, client, "other")
    with JobCounter(spark) as jobs:
        report = copy_files(spark, client, str(f), "orders", format="csv", at=50)
    other.join(5)
    assert (jobs.count, report.attempts, report.time, upper(client)) == (1, 1, 50, 51)
    batches = client.state("orders").batches
    assert [(b.desc.lower.time, b.desc.upper.time) for b in batches[-2:]] == [(3, 4), (4, 51)]
    assert snapshot(client, 49) == rows(("b", 2), ("other", 0))
    assert snapshot(client, 50) == rows(("b", 2), ("other", 0), ("x", 1))
    assert stray_parts(client) == []


def test_an_upper_that_keeps_moving_fails_the_copy_cleanly(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = make_collection(tmp_path / "loc")
    f = tmp_path / "in.csv"
    f.write_text("k,v\nx,1\n")
    stop = threading.Event()
    writer = client.open_writer("orders")
    ticks: list[int] = []

    def tick() -> None:  # a source appending every 10 ms
        while not stop.is_set():
            lower = writer.fetch_recent_upper().time
            assert lower is not None
            writer.compare_and_append_batch([], lower, lower + 1)
            ticks.append(lower)
            time.sleep(0.01)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        with JobCounter(spark) as jobs, pytest.raises(UpperMismatch):
            copy_files(spark, client, str(f), "orders", format="csv", attempts=2)
    finally:
        stop.set()
        ticker.join(5)
        writer.expire()
    assert jobs.count == 2 and len(ticks) >= 2
    last = upper(client)
    assert last is not None
    assert snapshot(client, last - 1) == rows(("b", 2))
    other = AppendWhenAJobRuns(spark, client, "other", to=last + 10)
    with pytest.raises(UpperMismatch, match=rf"the shard upper is \[{last + 10}\]"):
        copy_files(spark, client, str(f), "orders", format="csv", at=last + 5)
    other.join(5)
    assert upper(client) == last + 10
    assert snapshot(client, last + 9) == rows(("b", 2), ("other", 0))
    assert stray_parts(client) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_model_the_snapshot_at_the_copy_time_is_before_plus_the_files(
    spark: SparkSession, tmp_path: Path, seed: int
) -> None:
    """Random prior contents and random files (CSV or JSON, some bad rows): every time
    before the COPY reads as before, and its time reads as before plus the files' rows."""
    rng = random.Random(seed)
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("orders", SCHEMA)
    model: Counter[tuple[Any, ...]] = Counter()
    history = []
    for t in range(rng.randint(1, 4)):
        updates = []
        for _ in range(rng.randint(0, 5)):
            row = (rng.choice("abc"), rng.randint(0, 3))
            diff = -1 if model[(*row, None)] > 0 and rng.random() < 0.4 else 1
            model[(*row, None)] += diff
            updates.append((row, t, diff))
        writer.append(updates, t, t + 1)
        history.append(+Counter(model))
    writer.expire()
    fmt = rng.choice(["csv", "json"])
    d = tmp_path / "in"
    d.mkdir()
    expected = Counter(model)
    for i in range(rng.randint(1, 4)):
        lines = ["k,v"] if fmt == "csv" else []
        for n in range(rng.randint(0, 30)):
            k, v = rng.choice("xyz"), rng.choice([rng.randint(-9, 9), None])
            line = len(lines) + 1
            if rng.random() < 0.1:
                lines.append("bad,bad" if fmt == "csv" else '{"k": 1}')
                expected[(None, None, f"{d / f'{i}.{fmt}'}:{line}")] += 1
                continue
            if fmt == "csv":
                lines.append(f"{k},{'' if v is None else v}")
            else:
                lines.append(
                    json.dumps({"k": k, "v": v}) if n % 2 else json.dumps({"v": v, "k": k})
                )
            expected[(k, v, None)] += 1
        (d / f"{i}.{fmt}").write_text("".join(line + "\n" for line in lines))
    report = copy_files(spark, client, str(d), "orders", format=fmt, on_error="err_rows")
    assert report.time == len(history)
    for t, contents in enumerate(history):
        assert snapshot(client, t) == contents, t
    got = snapshot(client, report.time)
    located = Counter({(k, v, e.split(": ")[0] if e else None): n for (k, v, e), n in got.items()})
    assert located == +expected
    assert report.rows == sum(expected.values()) - sum(model.values())


def test_the_copy_command(spark: SparkSession, tmp_path: Path) -> None:
    client = make_collection(tmp_path / "loc")
    f = tmp_path / "in.csv"
    f.write_text("x,1\ny,2\n")
    runner = CliRunner()
    args = ["copy", str(f), "--into", "orders", "--format", "csv", "--no-header"]
    out = runner.invoke(app, [*args, "-l", str(tmp_path / "loc")])
    assert out.exit_code == 0, (out.output, out.exception)
    assert out.output == "COPY 2 rows from 1 file into 'orders' at time 3\n"
    out = runner.invoke(app, [*args, "--at", "7", "-l", str(tmp_path / "loc"), "--json"])
    assert out.exit_code == 0, (out.output, out.exception)
    doc = json.loads(out.output)
    assert (doc["rows"], doc["time"], doc["upper"], doc["err_rows"]) == (2, 7, 8, 0)
    assert snapshot(client, 7) == rows(("b", 2), ("x", 1), ("y", 2), ("x", 1), ("y", 2))
    f.write_text("x,1\ny,two\n")
    out = runner.invoke(app, [*args, "--on-error", "err-rows", "-l", str(tmp_path / "loc")])
    assert out.exit_code == 0, (out.output, out.exception)
    assert "COPY 2 rows (1 err rows) from 1 file" in out.output


def test_the_copy_command_fails_in_one_line(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = make_collection(tmp_path / "loc")
    f = tmp_path / "in.csv"
    f.write_text("k,v\nx,1\ny,two\n")
    args = ["copy", str(f), "--into", "orders", "--format", "csv", "-l", str(tmp_path / "loc")]
    monkeypatch.setattr(sys, "argv", ["timeshard", *args])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert f"{f}:3: ValueError" in err
    assert upper(client) == 3


@pytest.mark.parametrize("split_bytes", [1 << 20, 64])
def test_a_line_longer_than_max_line_bytes_is_an_err_row_measured_not_held(
    spark: SparkSession, tmp_path: Path, split_bytes: int
) -> None:
    """A line past ``max_line_bytes`` is a bad row naming its length, and the lines after it
    load (a file without newlines was read whole into one line); a header that long is
    InvalidUsage. Whole files and files split into pieces alike."""
    client = make_collection(tmp_path / "loc")
    source = tmp_path / "in.csv"
    source.write_text("k,v\nx,1\n" + "y" * 300 + ",2\nz,3\n" + "w" * 200)
    report = copy_files(
        spark,
        client,
        str(source),
        "orders",
        format="csv",
        on_error="err_rows",
        max_line_bytes=100,
        split_bytes=split_bytes,
    )
    assert (report.rows, report.err_rows) == (4, 2)
    snap = snapshot(client, 3)
    assert +Counter({k: n for k, n in snap.items() if k[2] is None}) == rows(
        ("b", 2), ("x", 1), ("z", 3)
    )
    errs = sorted(k[2] for k in snap if k[2] is not None)
    assert errs == [
        f"{source}:3: ValueError: the line has 302 bytes, more than max_line_bytes 100",
        f"{source}:5: ValueError: the line has 200 bytes, more than max_line_bytes 100",
    ]
    with pytest.raises(InvalidUsage, match=r"header of .* more than max_line_bytes 2 bytes"):
        copy_files(spark, client, str(source), "orders", format="csv", max_line_bytes=2)
    with pytest.raises(InvalidUsage, match=r"max_line_bytes must be an int >= 1, got 0"):
        copy_files(spark, client, str(source), "orders", format="csv", max_line_bytes=0)
