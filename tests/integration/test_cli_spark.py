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

from timeshard.cli.main import app
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
