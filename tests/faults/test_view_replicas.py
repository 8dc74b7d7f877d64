"""Replicas of one view as OS processes, killed with SIGKILL at random, converge.

Two replica processes maintain one view into one shard while its input grows;
one of them is killed with ``kill -9`` and restarted several times at seeded
random moments. Once the input stops, the replicas catch up, and the view's
snapshot at every time equals the query over the input at that time. Run with
SQLite consensus and with PostgreSQL consensus.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from timeshard.location import open_location
from timeshard.persist import PersistClient

REPLICA = Path(__file__).with_name("view_replica.py")
INPUT = pa.schema([("k", pa.string()), ("v", pa.int64())])


def per_key(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    groups: dict[str, list[int]] = {}
    for r in rows:
        groups.setdefault(r["k"], []).extend([r["v"]] * r["_diff"])
    return Counter({(k, len(vs), sum(vs)): 1 for k, vs in groups.items() if vs})


def view_rows(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        assert r["_err"] is None, r
        out[(r["k"], r["n"], r["s"])] += r["_diff"]
    return Counter({k: v for k, v in out.items() if v})


def run_replicas(blob_uri: str, consensus_uri: str, tmp: Path, seed: int) -> None:
    rng = random.Random(seed)
    client = PersistClient(open_location(blob_uri, consensus_uri))
    writer = client.open_writer("inp", INPUT)
    hold_inp = client.open_leased_reader("inp")
    stop = tmp / "stop"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}

    def start(i: int) -> subprocess.Popen[bytes]:
        log = (tmp / f"replica-{i}-{time.monotonic_ns()}.log").open("wb")
        return subprocess.Popen(
            [sys.executable, str(REPLICA), blob_uri, consensus_uri, str(stop)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    replicas = [start(0), start(1)]
    kills = 0
    upper = 0
    try:
        deadline = time.monotonic() + 60
        while "per_key" not in client.list_shards():
            assert time.monotonic() < deadline, "no replica created the view"
            time.sleep(0.5)
        hold_view = client.open_leased_reader("per_key")
        for tick in range(14):
            ups = [((f"k{(tick + j) % 4}", tick * 10 + j), upper, 1) for j in range(3)]
            if tick >= 2:
                ups.append(((f"k{(tick - 2) % 4}", (tick - 2) * 10), upper, -1))
            writer.append(ups, upper, upper + 3)
            upper += 3
            if tick % 4 == 3:
                victim = rng.randrange(len(replicas))
                time.sleep(rng.uniform(0.0, 2.0))
                os.kill(replicas[victim].pid, signal.SIGKILL)
                replicas[victim].wait()
                kills += 1
                replicas[victim] = start(victim)
            time.sleep(rng.uniform(0.2, 1.0))
        deadline = time.monotonic() + 240
        while (client.state("per_key").upper.time or 0) < upper:
            assert time.monotonic() < deadline, client.state("per_key").upper
            assert any(r.poll() is None for r in replicas)
            time.sleep(0.5)
    finally:
        stop.touch()
        for r in replicas:
            try:
                r.wait(timeout=60)
            except subprocess.TimeoutExpired:
                r.kill()
    assert kills >= 3
    for t in range(upper):
        want = per_key(hold_inp.snapshot(t).to_pylist())
        assert view_rows(hold_view.snapshot(t).to_pylist()) == want, t


@pytest.mark.faults
@pytest.mark.spark
def test_replicas_killed_sqlite(tmp_path: Path) -> None:
    run_replicas(
        f"file://{tmp_path / 'blob'}", f"sqlite:///{tmp_path / 'c.sqlite'}", tmp_path, seed=1
    )


@pytest.mark.faults
@pytest.mark.spark
@pytest.mark.postgres
def test_replicas_killed_postgres(tmp_path: Path, postgres_dsn: str) -> None:
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE view_replicas")
    dsn = postgres_dsn.rsplit("/", 1)[0] + "/view_replicas"
    run_replicas(f"file://{tmp_path / 'blob'}", dsn, tmp_path, seed=2)
