"""``timeshard verify`` on Spark: a FILE upsert source and a SQL view, clean and then corrupted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from timeshard.catalog import read_catalog
from timeshard.cli.main import app
from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.file_source import FileSource
from timeshard.storage.ingest import Ingestion
from timeshard.storage.reclock import Remap
from timeshard.verify import Finding, VerifyReport, upsert_model, verify_location

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
VIEW_SQL = "SELECT length(name) AS len FROM f"  # a multiset: names of equal length repeat
RATIO_SQL = "SELECT id, 12 / (id - 3) AS q FROM f"  # fails (ANSI) on id 3: an err row


class Clock:
    def __init__(self) -> None:
        self.now = 100

    def __call__(self) -> int:
        self.now += 10
        return self.now


def findings(report: VerifyReport) -> dict[tuple[str, str, int | None], Finding]:
    return {(f.object, f.check, f.time): f for f in report.findings}


def test_verify_a_file_upsert_source_and_a_view(spark: SparkSession, tmp_path: Path) -> None:
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        check_pipeline(spark, tmp_path)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", ansi)


def check_pipeline(spark: SparkSession, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(b'{"id": 1, "name": "one"}\n{"id": 2, "name": "two"}\n')
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = Clock()
    hold = client.open_leased_reader("files", SCHEMA)  # keep the history readable
    ing = Ingestion(
        spark,
        client,
        FileSource("files", src, "json", SCHEMA),
        envelope="upsert",
        key_columns=["id"],
        clock=clock,
    )
    hold_remap = client.open_leased_reader("files.remap")  # ingestion compacts its bindings
    ing.step()
    with open(src / "a.jsonl", "ab") as f:
        f.write(b'{"id": 1, "name": "uno"}\n{"id": 3, "name": "three"}\nnot json\n')
    ing.step()
    view = MaterializedView.install(
        spark, client, ViewDefinition("lengths", {"f": "files"}, VIEW_SQL), background_io=False
    )
    hold_view = client.open_leased_reader("lengths")
    ratio = MaterializedView.install(
        spark, client, ViewDefinition("ratio", {"f": "files"}, RATIO_SQL), background_io=False
    )
    hold_ratio = client.open_leased_reader("ratio")
    view.catch_up()
    ratio.catch_up()
    (src / "b.jsonl").write_bytes(b'{"id": 2, "name": null}\n{"id": 4, "name": "four"}\n')
    ing.step()
    view.catch_up()
    ratio.catch_up()
    ratio_upper = client.state("ratio").upper.time
    assert ratio_upper is not None
    ratios = hold_ratio.snapshot(ratio_upper - 1).to_pylist()  # id 3's row is its error
    errs = sorted(r["_err"] for r in ratios if r["_err"] is not None)  # and the input's
    assert errs[1:] == ["division by zero in 12 / (id - 3)"] and "JSONDecodeError" in errs[0]
    assert sorted(r["id"] for r in ratios if r["_err"] is None) == [1, 4]  # 2: deleted (null)

    kinds = {(e.name, e.kind) for e in read_catalog(client)}
    assert kinds == {
        ("files", "source"),
        ("files", "export"),
        ("lengths", "view"),
        ("ratio", "view"),
    }

    def spark_for(packages: list[str]) -> Any:
        assert packages == []
        return spark

    report = verify_location(client, spark=spark_for, samples=50, seed=7)
    assert report.ok, [f.describe() for f in report.findings]
    lengths, files = report.objects["lengths"], report.objects["files"]
    assert lengths.kind == "view" and files.kind == "upsert export"
    assert len(lengths.times["query"]) >= 3 and len(files.times["upsert"]) >= 3
    assert not lengths.notes and not files.notes
    assert len(report.objects["ratio"].times["query"]) >= 3  # error snapshots included
    upper = client.state("lengths").upper.time
    assert upper is not None and max(lengths.times["query"]) == upper - 1

    # A wrong row appended to the view's shard at a time its input is readable.
    ing.step()  # the input moves on; the view does not
    assert (client.state("files").upper.time or 0) > upper + 1
    client.open_writer("lengths").append([((99,), upper, 1)], upper, upper + 1)
    report = verify_location(client, spark=spark_for, samples=50, seed=7)
    assert list(findings(report)) == [("lengths", "query", upper)]
    [wrong] = report.findings
    assert wrong.missing == () and wrong.missing_total == 0
    assert wrong.extra == ({"len": 99, "_err": None, "_diff": 1},) and wrong.extra_total == 1
    assert "1 row extra" in wrong.message

    # A wrong value for key 4 in the upsert export, at a time the remap has bound.
    out_upper = client.state("files").upper.time
    assert out_upper is not None
    Remap(client, "files.remap").mint(out_upper + 5, {})
    client.open_writer("files").append(
        [((4, "four"), out_upper, -1), ((4, "FOUR"), out_upper, 1)], out_upper, out_upper + 1
    )

    # The command finds both, exits with 1 (in this process: it gets this session).
    loc = str(tmp_path / "loc")
    out = CliRunner().invoke(app, ["verify", loc, "--samples", "50", "--seed", "7"])
    assert out.exit_code == 1, out.output
    lines = out.output.splitlines()
    at = lines.index(
        f"lengths [query] at time {upper}: 0 rows missing, 1 row extra (the view "
        "differs from its query over the inputs)"
    )
    assert lines[at + 1 : at + 2] == ['  extra   {"len": 99} x 1']
    at = lines.index(
        f"files [upsert] at time {out_upper}: 1 row missing, 1 row extra (the "
        "export differs from the last value per key of its source's records)"
    )
    assert lines[at + 1 : at + 3] == [
        '  missing {"id": 4, "name": "four"} x 1',
        '  extra   {"id": 4, "name": "FOUR"} x 1',
    ]
    assert lines[-1] == "2 findings in 6 objects"
    for handle in (hold, hold_remap, hold_view, hold_ratio):
        handle.expire()
    view.close()
    ratio.close()


def test_upsert_model_orders_by_time_then_offset(spark: SparkSession) -> None:
    """Bindings merged into the remap's since (5) lose the files' order: such keys are
    ambiguous when the files' last records differ; elsewhere time, then offset, wins."""
    records = spark.createDataFrame(
        [
            ("a", 0, 1, "x", None, 5),  # key 1: two files at the collapsed time, differing
            ("b", 0, 1, None, None, 5),
            ("a", 10, 2, "p", None, 5),  # key 2: one file: its last record wins
            ("a", 20, 2, "q", None, 5),
            ("a", 30, 3, "r", None, 5),  # key 3: a later time wins over a higher offset
            ("b", 5, 3, "s", None, 7),
            ("a", 40, 4, "u", None, 7),  # key 4: one bound time: the higher offset wins
            ("b", 50, 4, "v", None, 7),
            ("a", 60, None, None, "a@60: bad", 7),  # a decode error: an err row
            ("a", 70, 6, "w", None, 5),  # key 6: deleted at 7
            ("a", 80, 6, None, None, 7),
        ],
        "_partition string, _offset long, id long, name string, _err string, _bt long",
    )
    expected, ambiguous = upsert_model(spark, records, SCHEMA, ["id"], [5, 7], collapsed=5)
    got = sorted(
        ((r["_at"], r["id"] or 0, r["name"], r["_err"], r["_diff"]) for r in expected.collect()),
    )
    assert got == [
        (5, 2, "q", None, 1),
        (5, 3, "r", None, 1),
        (5, 6, "w", None, 1),
        (7, 0, None, "a@60: bad", 1),
        (7, 2, "q", None, 1),
        (7, 3, "s", None, 1),
        (7, 4, "v", None, 1),
    ]
    assert sorted(tuple(r) for r in ambiguous.collect()) == [(5, 1), (7, 1)]


def test_verify_a_key_value_upsert_against_the_generator(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The KEY VALUE generator is replayed from its catalog options: clean, then a wrong value."""
    from timeshard.storage.sources import KeyValueGenerator

    client = PersistClient(Location.embedded(tmp_path / "loc"))
    kv = KeyValueGenerator(keys=20, value_size=6, rate=8, partitions=2, seed=3)
    ing = Ingestion(spark, client, kv, envelope="upsert", key_columns=["key"], clock=Clock())
    holds = [client.open_leased_reader(s) for s in ("kv", "kv.remap")]
    for _ in range(5):
        ing.step()

    def spark_for(packages: list[str]) -> Any:
        return spark

    report = verify_location(client, spark=spark_for, samples=20, seed=3)
    assert report.ok, [f.describe() for f in report.findings]
    assert report.objects["kv"].kind == "upsert export"
    assert len(report.objects["kv"].times["upsert"]) >= 3

    upper = client.state("kv").upper.time
    assert upper is not None
    Remap(client, "kv.remap").mint(upper + 5, {})
    [row] = [r for r in holds[0].snapshot(upper - 1).to_pylist() if r["key"] == 0]
    client.open_writer("kv").append(
        [((0, row["value"]), upper, -1), ((0, "WRONG"), upper, 1)], upper, upper + 1
    )
    report = verify_location(client, spark=spark_for, samples=20, seed=3)
    assert list(findings(report)) == [("kv", "upsert", upper)]
    [wrong] = report.findings
    assert wrong.extra == ({"key": 0, "value": "WRONG", "_err": None, "_diff": 1},)
    for h in holds:
        h.expire()


def test_a_view_ahead_of_its_input_is_found_not_noted(spark: SparkSession, tmp_path: Path) -> None:
    """A view whose upper passed its input's, with a wrong row there, only got the note
    "inputs not readable": ok. Only an input compacted away at a time is a note."""
    from timeshard.catalog import record_view

    rows = pa.schema([("k", pa.string()), ("v", pa.int64())])
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    for name in ("o", "v"):
        writer = client.open_writer(name, rows)
        writer.append([(("a", 1), 0, 1), (("b", 2), 1, 1)], 0, 3)
    client.open_writer("v").append([(("WRONG", 666), 5, 1)], 3, 10)
    record_view(client, ViewDefinition("v", {"o": "o"}, "SELECT k, v FROM o"), as_of=0)
    hold = client.open_leased_reader("o")
    hold.downgrade_since(1)  # time 0 of the input is compacted away

    report = verify_location(client, spark=lambda packages: spark, samples=50, seed=1)
    assert list(findings(report)) == [("v", "frontiers", 3)]
    v = report.objects["v"]
    assert sorted(v.times["query"]) == [1, 2]  # below the input's upper only
    assert v.notes == ["inputs compacted away at 1 sampled times [0]: not recomputed there"]
    hold.expire()
