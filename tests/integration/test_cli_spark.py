"""The Spark-backed commands: query AS OF a time, subscribe, and the demo itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from timeshard.cli.main import app, main
from timeshard.location import Location
from timeshard.persist import PersistClient

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def test_query_and_subscribe(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("orders", SCHEMA)
    writer.append([(("a", 1), 0, 1), (("b", 2), 1, 1)], 0, 2)
    writer.append([(("a", 1), 2, -1), (("c", 3), 2, 2)], 2, 3)
    runner = CliRunner()
    out = runner.invoke(
        app,
        [
            "query",
            "SELECT k, sum(v) AS s FROM orders GROUP BY k",
            "--as-of",
            "1",
            "-l",
            str(tmp_path),
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["rows"]
    assert sorted((r["k"], r["s"]) for r in rows) == [("a", 1), ("b", 2)]
    out = runner.invoke(
        app, ["query", "SELECT count(*) AS n FROM orders", "-l", str(tmp_path), "--json"]
    )
    assert json.loads(out.output)["rows"] == [{"n": 3}]  # b, c, c at the latest time
    out = runner.invoke(
        app, ["subscribe", "orders", "--from", "0", "--seconds", "1", "-l", str(tmp_path)]
    )
    assert out.exit_code == 0, out.output
    lines = [json.loads(x) for x in out.output.splitlines()]
    assert lines[0]["k"] == "a" and lines[-1] == {"progress": 3}
    assert sorted((x["k"], x["_ts"], x["_diff"]) for x in lines if "k" in x) == [
        ("a", 0, 1),
        ("a", 2, -1),
        ("b", 1, 1),
        ("c", 2, 2),
    ]


def test_query_defaults_to_the_latest_time_its_shards_share(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    orders = client.open_writer("orders", SCHEMA)
    orders.append([(("a", 1), 0, 1)], 0, 3)
    later = client.open_writer("more.orders", SCHEMA)
    later.append([(("b", 2), 0, 1), (("c", 3), 4, 1)], 0, 6)
    client.open_writer("empty", SCHEMA).expire()  # named by no query: does not matter
    runner = CliRunner()
    sql = "SELECT k FROM orders UNION ALL SELECT k FROM `more.orders`"
    out = runner.invoke(app, ["query", sql, "-l", str(tmp_path), "--json"])
    assert out.exit_code == 0, (out.output, out.exception)
    doc = json.loads(out.output)
    assert doc["as_of"] == 2 and sorted(r["k"] for r in doc["rows"]) == ["a", "b"]
    out = runner.invoke(
        app, ["query", "SELECT count(*) AS n FROM `more.orders`", "-l", str(tmp_path), "--json"]
    )
    assert json.loads(out.output) == {"as_of": 5, "rows": [{"n": 2}]}


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    ("sql", "condition"),
    [
        ("SELEC k FROM orders", "PARSE_SYNTAX_ERROR"),
        ("SELECT k FROM orderz JOIN orders", "TABLE_OR_VIEW_NOT_FOUND"),
        ("SELECT nope FROM orders", "UNRESOLVED_COLUMN"),
    ],
)
def test_spark_errors_are_one_line(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    sql: str,
    condition: str,
    as_json: bool,
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    client.open_writer("orders", SCHEMA).append([(("a", 1), 0, 1)], 0, 1)
    args = ["timeshard", "query", sql, "-l", str(tmp_path), *(["--json"] if as_json else [])]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    assert e.value.code == 2 and out.out == "", out
    assert out.err.startswith("error: ") and out.err.count("\n") == 1, out.err
    assert condition in out.err and "at org.apache" not in out.err


def test_demo_command_runs_and_checks(tmp_path: Path) -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from timeshard.cli.main import main; main()",
            "demo",
            "--seconds",
            "3",
            "--location",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "consistent" in result.stdout and "INCONSISTENT" not in result.stdout
    client = PersistClient(Location.embedded(tmp_path / "demo"))
    objects = ("auction.bids", "kv", "winning_bids", "bids_per_user")
    leaked = {o: list(client.state(o).leased_readers) for o in objects}
    assert leaked == {o: [] for o in objects}  # the demo released what it read
    out = CliRunner().invoke(app, ["status", "-l", str(tmp_path / "demo"), "--json"])
    statuses = {r["object"]: r["status"] for r in json.loads(out.output)}
    assert statuses["auction.bids"] == statuses["kv"] == "stopped", statuses


def test_run_declaration_file(tmp_path: Path) -> None:
    spec = tmp_path / "run.toml"
    spec.write_text(f"""
[location]
dir = "{tmp_path / "loc"}"

[[source]]
name = "counter"
kind = "counter"
options = {{ rate = 5, max_cardinality = 8 }}

[[view]]
name = "total"
inputs = {{ c = "counter" }}
sql = "SELECT count(*) AS n, sum(counter) AS s FROM c"
""")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from timeshard.cli.main import main; main()",
            "run",
            str(spec),
            "--seconds",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    upper = client.state("total").upper.time
    assert upper is not None and upper > 0
    [row] = client.open_leased_reader("total").snapshot(upper - 1).to_pylist()
    assert row["n"] == 8
