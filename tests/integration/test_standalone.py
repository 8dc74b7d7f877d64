"""Every test on a standalone master and worker started with spark-class, in one file.

The cluster (``spark_standalone``, ``conftest.py``) is session-scoped, and
pytest-xdist's ``--dist loadfile`` runs each file on one worker: two files that
use it, run by CI's two workers, started two clusters (a master and a worker
JVM each). In one file it starts once.

**The shared Spark checks.** They run in a child process
(``standalone_main.py``): this process already holds the tier's local
SparkContext (see ``conftest.py``).

**Shards on S3: a whole pipeline on SeaweedFS, PostgreSQL consensus and the
cluster.**
The deployment a user who outgrows one machine has: the blob is an
``s3a://`` bucket (SeaweedFS's S3 gateway, started by the tests), consensus
is a PostgreSQL server (started by the tests) and Spark is a standalone
master and worker (``spark-class``). ``timeshard run`` runs a declaration
with a KEY VALUE source under UPSERT and two views on that cluster, twice
(the second run resumes the first), and then ``timeshard verify`` -- in its
own process, with a local Spark reading the parts through s3a -- must find
the location right: the UPSERT output equals the generator's last value per
key at sampled times, and each view equals its query over its input.

Parts are written by the executors through pyarrow's S3 filesystem and read
by Spark's Parquet reader through hadoop-aws (``s3a_settings``); nothing is on
the local disk but the processes' scratch. The location is also read from
this process with ``shard list`` and ``shard snapshot`` (pyarrow, no Spark).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.integration.standalone_cluster import cluster_env
from typer.testing import CliRunner

from timeshard.cli.main import app

pytestmark = [pytest.mark.spark, pytest.mark.standalone]

MAIN = Path(__file__).with_name("standalone_main.py")


def test_write_and_snapshot_on_standalone_cluster(spark_standalone: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(MAIN), spark_standalone, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=cluster_env(tmp_path),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert f"standalone checks passed on {spark_standalone}" in result.stdout


KEYS = 40
#: How long each ``timeshard run`` ticks: its first tick runs whatever this is (the Spark
#: start and the executor launch on the cluster come before it), and one tick per run is
#: what the test needs, so 1 s.
RUN_SECONDS = "1"


def declaration(blob: str, consensus: str, master: str) -> str:
    return f"""
[location]
blob = "{blob}"
consensus = "{consensus}"

[spark]
master = "{master}"
conf = {{ "spark.executor.memory" = "768m", "spark.cores.max" = "1" }}

[[source]]
name = "kv"
kind = "key_value"
envelope = "upsert"
key_columns = ["key"]
options = {{ keys = {KEYS}, value_size = 4, rate = 30, partitions = 2 }}

[[view]]
name = "per_prefix"
inputs = {{ kv = "kv" }}
sql = "SELECT substr(value, 1, 1) AS p, count(*) AS n FROM kv GROUP BY p"

[[view]]
name = "long_values"
inputs = {{ kv = "kv" }}
sql = "SELECT key, value FROM kv WHERE length(value) >= 4"
"""


def timeshard(args: list[str], env: dict[str, str], timeout: float) -> str:
    result = subprocess.run(
        [sys.executable, "-c", "from timeshard.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert result.returncode == 0, (args, result.stdout[-3000:], result.stderr[-6000:])
    return result.stdout


def cli_json(*args: str) -> Any:
    out = CliRunner().invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


@pytest.mark.s3
@pytest.mark.postgres
def test_a_pipeline_on_s3_postgres_and_a_standalone_cluster(
    s3_server: Any, postgres_server: Any, spark_standalone: str, tmp_path: Path
) -> None:
    blob = s3_server.uri(f"pipeline-{uuid.uuid4().hex[:8]}")
    consensus = postgres_server.isolated_dsn()
    spec = tmp_path / "pipeline.toml"
    spec.write_text(declaration(blob, consensus, spark_standalone))
    env = cluster_env(tmp_path)  # the AWS environment of s3_server included
    uppers = []
    for _ in range(2):
        timeshard(["run", str(spec), "--seconds", RUN_SECONDS], env, timeout=900)
        shards = {
            s["shard"]: s
            for s in cli_json("shard", "list", "--blob", blob, "--consensus", consensus)
        }
        assert {"kv", "per_prefix", "long_values"} <= set(shards), sorted(shards)
        uppers.append(shards["kv"]["upper"])
    assert uppers[1] > uppers[0] > 0, uppers  # the second run resumed and went on

    rows = cli_json("shard", "snapshot", "kv", "--blob", blob, "--consensus", consensus)["rows"]
    assert 0 < len(rows) <= KEYS and all(r["_diff"] == 1 for r in rows), rows[:5]
    report = json.loads(
        timeshard(["verify", "--blob", blob, "--consensus", consensus, "--json"], env, 900)
    )
    assert report["ok"], json.dumps(report)[:4000]
    checks = {o["object"]: set(o["checks"]) for o in report["objects"]}
    assert "upsert" in checks["kv"], checks
    assert "query" in checks["per_prefix"] and "query" in checks["long_values"], checks
