"""The writes of an UPSERT tick and of a COPY clean their prefix of temporaries.

A task attempt killed while it filled its part leaves a hidden ``.tmp-<hex>``
under the batch prefix; no listing of keys names it. GC deletes it only once
the batch is in the shard or its writer is gone, so a long-lived writer whose
write failed would keep it for its life. As the Spark part write does, each
write deletes its prefix's temporaries when its job ended: failed (with the
parts) or succeeded (with the parts no kept attempt names).

Each test leaves a temporary under the write's own prefix, as a killed attempt
would, when the driver makes the write's task (the prefix is only known then).
A write that succeeded is checked when it has its parts, before its batch is
appended: after that, GC (run by the writer's compactor) may delete it too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage import CopyError, copy_files, copy_from, upsert_pass, upsert_spark
from timeshard.storage.upsert_spark import SparkFeedbackUpsert

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
DDL = "k string, v long, _ts long, _order long, _delete boolean, _err string"


def leaving_a_temporary(make: Callable[..., Any], blob_root: Path, left: list[Path]) -> Any:
    """``make`` (a task's class), whose every instance first leaves a temporary under its
    prefix (its second argument) and appends the temporary's path to ``left``."""

    def made(root_uri: str, key_prefix: str, *rest: Any) -> Any:
        path = blob_root / key_prefix / f".tmp-{uuid.uuid4().hex}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1 half a part")
        left.append(path)
        return make(root_uri, key_prefix, *rest)

    return made


def temporaries(directory: Path) -> list[Path]:
    return sorted(directory.rglob(".tmp-*"))


def checking_when_written(
    module: Any, blob_root: Path, monkeypatch: pytest.MonkeyPatch
) -> list[list[Path]]:
    """The temporaries under ``blob_root`` each time ``module.written_parts`` returned."""
    seen: list[list[Path]] = []
    written_parts = module.written_parts

    def checked(*args: Any) -> Any:
        parts = written_parts(*args)
        seen.append(temporaries(blob_root))
        return parts

    monkeypatch.setattr(module, "written_parts", checked)
    return seen


@pytest.mark.parametrize("fails", [True, False])
def test_an_upsert_tick_deletes_the_temporaries_of_its_write(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    hold = client.open_leased_reader("out", SCHEMA)
    upsert = SparkFeedbackUpsert(spark, client, "out", SCHEMA, ["k"])
    left: list[Path] = []
    planted = leaving_a_temporary(upsert_spark.UpsertPass, tmp_path / "blob", left)
    monkeypatch.setattr(upsert_spark, "UpsertPass", planted)
    seen = checking_when_written(upsert_spark, tmp_path / "blob", monkeypatch)
    a, b = ("a", 10, 0, 7, False, None), ("a", 20, 0, 7, False, None)
    if fails:  # two different commands at one position fail the pass's task
        with pytest.raises(InvalidUsage, match="two different upsert commands"):
            upsert.apply(spark.createDataFrame([a, b], DDL).coalesce(1), 1)
        assert client.state("out").upper.time == 0
    else:
        upsert.apply(spark.createDataFrame([a], DDL), 1)
        assert [r["v"] for r in hold.snapshot(0).to_pylist()] == [10]
        assert seen == [[]]
    [temporary] = left
    assert temporary.parent.parent.name == upsert._writer.writer_id  # the write's own prefix
    assert temporaries(tmp_path / "blob") == []
    upsert.close()
    hold.expire()


@pytest.mark.parametrize("how", ["bad_rows", "job_fails", "succeeds"])
def test_a_copy_deletes_the_temporaries_of_its_write(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("orders", SCHEMA).expire()
    left: list[Path] = []
    planted = leaving_a_temporary(copy_from.CopyTask, tmp_path / "loc" / "blob", left)
    monkeypatch.setattr(copy_from, "CopyTask", planted)
    seen = checking_when_written(upsert_pass, tmp_path / "loc" / "blob", monkeypatch)
    f = tmp_path / "in.csv"
    f.write_text(
        {"bad_rows": "k,v\na,x\n", "job_fails": "k,w\na,1\n", "succeeds": "k,v\na,1\n"}[how]
    )
    error = {"bad_rows": CopyError, "job_fails": InvalidUsage}.get(how)
    if error is None:
        copy_files(spark, client, str(f), "orders", format="csv")
        assert client.state("orders").upper.time == 1
        assert seen == [[]]
    else:
        with pytest.raises(error):
            copy_files(spark, client, str(f), "orders", format="csv")
        assert client.state("orders").upper.time == 0
    assert len(left) == 1
    assert temporaries(tmp_path / "loc" / "blob") == []
