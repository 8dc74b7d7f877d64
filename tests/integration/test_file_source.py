"""FILE sources: appended lines are picked up, malformed lines become err rows."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.file_source import FileSource
from timeshard.storage.ingest import Ingestion

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def test_json_directory_with_bad_lines(spark: SparkSession, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(b'{"id": 1, "name": "one"}\n{"id": 2, "name": "two"}\n')
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    hold = client.open_leased_reader("files", SCHEMA)
    clock = itertools.count(1)

    def ingestion() -> Ingestion:
        return Ingestion(
            spark, client, FileSource("files", src, "json", SCHEMA), clock=lambda: next(clock)
        )

    ing = ingestion()
    ing.step()
    with open(src / "a.jsonl", "ab") as f:
        f.write(b'{"id": 3, "name": "three"}\nnot json at all\n{"id": "x", "name": 4}\n')
        f.write(b'\xff\xfe invalid utf-8\n{"id": 9, "name": "half a li')
    (src / "b.jsonl").write_bytes(b'{"id": 10, "name": "ten"}\n')
    ing = ingestion()  # a restart in between
    ing.step()
    ing.step()
    upper = client.state("files").upper.time
    assert upper is not None
    rows = hold.snapshot(upper - 1).to_pylist()
    ok = sorted((r["id"], r["name"]) for r in rows if r["_err"] is None)
    assert ok == [(1, "one"), (2, "two"), (3, "three"), (10, "ten")]
    errs = sorted(r["_err"] for r in rows if r["_err"] is not None)
    assert len(errs) == 3
    offset_bad = len(
        b'{"id": 1, "name": "one"}\n{"id": 2, "name": "two"}\n{"id": 3, "name": "three"}\n'
    )
    assert any(e.startswith(f"a.jsonl@{offset_bad}: JSONDecodeError") for e in errs), errs
    assert any("UnicodeDecodeError" in e for e in errs), errs
    assert all(r["_diff"] == 1 for r in rows)
    # The half-written line is read once its newline arrives, exactly once.
    with open(src / "a.jsonl", "ab") as f:
        f.write(b'ne"}\n')
    ing.step()
    upper = client.state("files").upper.time
    assert upper is not None
    final = hold.snapshot(upper - 1).to_pylist()
    assert sorted(r["id"] for r in final if r["_err"] is None) == [1, 2, 3, 9, 10]
    assert len(final) == 8


def test_a_file_rewritten_shorter_stalls_the_source_and_loses_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(b'{"id": 1, "name": "one"}\n{"id": 2, "name": "two"}\n')
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    ing = Ingestion(
        spark, client, FileSource("files", src, "json", SCHEMA), clock=lambda: next(clock)
    )
    ing.step()
    upper = client.state("files").upper
    (src / "a.jsonl").write_bytes(b'{"id": 9, "name": "nine"}\n')  # shorter than bound
    for _ in range(2):  # stalled, not skipped past: every step says so
        with pytest.raises(SourceUnavailable, match=r"'a\.jsonl' ends at 26 below the bound 50"):
            ing.step()
    assert client.state("files").upper == upper  # nothing written past the rewrite


def test_a_file_rewritten_while_no_process_ran_stalls_the_restarted_source(
    spark: SparkSession, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(b'{"id": 1, "name": "one"}\n{"id": 2, "name": "two"}\n')
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)

    def ingestion() -> Ingestion:
        return Ingestion(
            spark, client, FileSource("files", src, "json", SCHEMA), clock=lambda: next(clock)
        )

    ing = ingestion()
    ing.step()
    ing.close()
    upper = client.state("files").upper
    # Rewritten while stopped: longer, with a line end just before the bound offset 50.
    (src / "a.jsonl").write_bytes(
        b'{"id": 7, "name": "sev"}\n{"id": 8, "name": "eig"}\n{"id": 9, "name": "nin"}\n'
    )
    ing = ingestion()
    for _ in range(2):  # stalled, as a running source is, not read on from byte 50
        with pytest.raises(InvalidUsage, match=r"'a\.jsonl' no longer holds .*rewritten"):
            ing.step()
    assert client.state("files").upper == upper  # id 9 alone was not written
    ing.close()


def test_csv_and_bad_arguments(spark: SparkSession, tmp_path: Path) -> None:
    f = tmp_path / "data.csv"
    f.write_text("1,alpha\n2\n3,gamma\n")
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    ing = Ingestion(spark, client, FileSource("csvsrc", f, "csv", SCHEMA), clock=lambda: 5)
    ing.step()
    rows = client.open_leased_reader("csvsrc").snapshot(5).to_pylist()
    assert sorted((r["id"], r["name"]) for r in rows if r["_err"] is None) == [
        (1, "alpha"),
        (3, "gamma"),
    ]
    assert [r["_err"] for r in rows if r["_err"]] == [
        "data.csv@8: ValueError: expected 2 fields, got 1"
    ]
    with pytest.raises(Exception, match="format must be one of"):
        FileSource("x", f, "xml", SCHEMA)
