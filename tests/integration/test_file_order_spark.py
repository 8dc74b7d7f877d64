"""The FILE source's record order under UPSERT, through the Spark path production uses.

A FILE source's records are ordered by (reclocked time, file name as UTF-8
bytes, byte offset) (:mod:`timeshard.storage.file_source`). Commands of two
files to one key bound at one time are decided by the file name, whatever
their offsets, the order the files were created in, or how Spark splits the
work; and ``timeshard verify`` derives the same from the files on its own.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.file_source import FileSource
from timeshard.storage.ingest import Ingestion
from timeshard.storage.reclock import Remap
from timeshard.verify import upsert_model, verify_location

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def line(key: int, name: str) -> bytes:
    return f'{{"id": {key}, "name": "{name}"}}\n'.encode()


class Files:
    """A directory of JSON files ingested with UPSERT on ``id``, one tick per ``step``."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.src = root / "in"
        self.src.mkdir()
        self.client = PersistClient(Location.embedded(root / "loc"))
        clock = itertools.count(100, 10)
        self.holds = [self.client.open_leased_reader("files", SCHEMA)]
        self.ingestion = Ingestion(
            spark,
            self.client,
            FileSource("files", self.src, "json", SCHEMA),
            envelope="upsert",
            key_columns=["id"],
            clock=lambda: next(clock),
        )
        self.holds.append(self.client.open_leased_reader("files.remap"))

    def write(self, name: str, data: bytes) -> None:
        path = self.src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.write(data)

    def step(self) -> int:
        """One tick; the latest readable time of the output."""
        self.ingestion.step()
        upper = self.client.state("files").upper.time
        assert upper is not None
        return upper - 1

    def content(self, at: int) -> dict[int, str]:
        rows = self.holds[0].snapshot(at).to_pylist()
        assert all(r["_diff"] == 1 and r["_err"] is None for r in rows), rows
        return {r["id"]: r["name"] for r in rows}

    def close(self) -> None:
        self.ingestion.close()
        for h in self.holds:
            h.expire()


@pytest.mark.parametrize("created", ["a first", "b first"])
def test_the_later_file_wins_at_one_time_whatever_the_offsets(
    spark: SparkSession, tmp_path: Path, created: str
) -> None:
    """Key 1 is at a high offset of a.jsonl and at offset 0 of b.jsonl: b.jsonl sorts later."""
    files = Files(spark, tmp_path)
    a = line(2, "a two") + line(3, "a three") + line(1, "from a")
    b = line(1, "from b") + line(3, "b three")
    for name in ["a.jsonl", "b.jsonl"] if created == "a first" else ["b.jsonl", "a.jsonl"]:
        files.write(name, a if name == "a.jsonl" else b)
    t = files.step()  # both files are bound at one time
    assert files.content(t) == {1: "from b", 2: "a two", 3: "b three"}
    # A file that sorts first but appears later is bound later: its records win by time.
    files.write("0.jsonl", line(1, "from 0"))
    files.write("b.jsonl", line(3, "b three again"))
    t = files.step()
    assert files.content(t) == {1: "from 0", 2: "a two", 3: "b three again"}
    files.close()


def test_equal_offsets_tie_break_by_file_name_bytes(spark: SparkSession, tmp_path: Path) -> None:
    """Every key at the same offset of four files: the name greatest as UTF-8 bytes wins.

    ``a/b.jsonl`` > ``a.jsonl`` > ``a-b.jsonl`` as bytes ('/' > '.' > '-'), though by
    path components ``a/b.jsonl`` would come first. (Ordered by offset alone, the
    tie went to whichever row Spark's shuffle delivered first: with four files,
    ``a.jsonl``.)
    """
    names = ["a/b.jsonl", "a.jsonl", "a-b.jsonl", "0.jsonl"]
    files = Files(spark, tmp_path)
    for name in names:
        files.write(name, b"".join(line(k, f"{name} {k}") for k in range(12)))
    t = files.step()
    assert files.content(t) == {k: f"a/b.jsonl {k}" for k in range(12)}
    # Equal offsets again, one tick later, after the files grew by equal lengths.
    for name in reversed(names):
        files.write(name, b"".join(line(k, f"{name} {k}!") for k in range(12)))
    t = files.step()
    assert files.content(t) == {k: f"a/b.jsonl {k}!" for k in range(12)}
    files.close()


def test_verify_model_orders_files_at_one_time(spark: SparkSession) -> None:
    """verify's own model: at one bound time the later file wins, not the higher offset."""
    records = spark.createDataFrame(
        [
            ("a.jsonl", 66, 1, "from a", None, 5),
            ("b.jsonl", 0, 1, "from b", None, 5),
            ("a.jsonl", 0, 2, "a two", None, 5),
            ("b.jsonl", 0, 2, "b two", None, 7),  # equal offsets, a later time
            ("a/b.jsonl", 9, 3, "nested", None, 7),  # '/' sorts after '.' and '-'
            ("a.jsonl", 9, 3, "flat", None, 7),
            ("a-b.jsonl", 9, 3, "dashed", None, 7),
        ],
        "_partition string, _offset long, id long, name string, _err string, _bt long",
    )
    expected, ambiguous = upsert_model(spark, records, SCHEMA, ["id"], [5, 7], collapsed=0)
    got = sorted((r["_at"], r["id"], r["name"], r["_diff"]) for r in expected.collect())
    assert got == [
        (5, 1, "from b", 1),
        (5, 2, "a two", 1),
        (7, 1, "from b", 1),
        (7, 2, "b two", 1),
        (7, 3, "nested", 1),
    ]
    assert ambiguous.collect() == []


def test_verify_catches_a_shard_that_took_the_other_files_value(
    spark: SparkSession, tmp_path: Path
) -> None:
    """verify derives the winner from the files: it accepts b's value and flags a's.

    A verify that ordered by offset alone would flag the correct shard and accept
    the wrong one.
    """
    files = Files(spark, tmp_path)
    files.write("a.jsonl", line(2, "a two") + line(1, "from a"))
    files.write("b.jsonl", line(1, "from b"))
    t = files.step()
    assert files.content(t) == {1: "from b", 2: "a two"}

    def spark_for(packages: list[str]) -> Any:
        return spark

    report = verify_location(files.client, spark=spark_for, samples=20, seed=1)
    assert report.ok, [f.describe() for f in report.findings]
    assert t in report.objects["files"].times["upsert"]
    assert not report.objects["files"].notes

    # The shard takes a.jsonl's value for key 1 at a time the remap has bound.
    upper = t + 1
    Remap(files.client, "files.remap").mint(upper + 5, {})
    files.client.open_writer("files").append(
        [((1, "from b"), upper, -1), ((1, "from a"), upper, 1)], upper, upper + 1
    )
    report = verify_location(files.client, spark=spark_for, samples=20, seed=1)
    assert [(f.object, f.check, f.time) for f in report.findings] == [("files", "upsert", upper)]
    [wrong] = report.findings
    assert wrong.missing == ({"id": 1, "name": "from b", "_err": None, "_diff": 1},)
    assert wrong.extra == ({"id": 1, "name": "from a", "_err": None, "_diff": 1},)
    files.close()


def test_an_unkeyed_error_does_not_outrank_the_null_keys_command(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A line that does not decode names no key: the null key's command bound at the
    same time applies all the same, though the bad line comes later; verify agrees."""
    files = Files(spark, tmp_path)
    files.write("a.jsonl", b'{"id": null, "name": "null key"}\nnot json\n')
    t = files.step()
    rows = files.holds[0].snapshot(t).to_pylist()
    assert len(rows) == 2
    assert {(r["id"], r["name"], r["_err"], r["_diff"]) for r in rows} == {
        (None, None, "a.jsonl@33: JSONDecodeError: Expecting value: line 1 column 1 (char 0)", 1),
        (None, "null key", None, 1),
    }
    report = verify_location(files.client, spark=lambda packages: spark, samples=5, seed=1)
    assert report.ok, [f.describe() for f in report.findings]
    files.close()
