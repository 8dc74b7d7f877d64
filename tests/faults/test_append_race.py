"""Four OS processes race compare_and_append on one shard.

Every success must be seen in order, no append lost or applied twice, and
uppers strictly increase; once with SQLite consensus, once with PostgreSQL.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from timeshard import Frontier
from timeshard.location import open_location
from timeshard.persist import PersistClient, Progress, Updates

RACER = Path(__file__).with_name("racer.py")
PROCESSES = 4
APPENDS = 25


def race(blob_uri: str, consensus_uri: str, tmp_path: Path) -> None:
    shard = f"race-{uuid.uuid4().hex[:8]}"
    procs = []
    for i in range(PROCESSES):
        out = tmp_path / f"racer-{i}.json"
        args = [
            sys.executable,
            str(RACER),
            blob_uri,
            consensus_uri,
            shard,
            str(i),
            str(APPENDS),
            str(out),
        ]
        procs.append((subprocess.Popen(args), out))
    for p, _ in procs:
        assert p.wait(timeout=300) == 0
    results = [json.loads(out.read_text()) for _, out in procs]

    seen: dict[int, int] = {}
    for i, r in enumerate(results):
        succ = r["successes"]
        assert len(succ) == APPENDS
        assert succ == sorted(succ) and len(set(succ)) == len(succ), succ
        for t in succ:
            assert t not in seen, f"upper {t} claimed by writers {seen[t]} and {i}"
            seen[t] = i
    total = PROCESSES * APPENDS
    assert sorted(seen) == list(range(total))

    client = PersistClient(open_location(blob_uri, consensus_uri))
    reader = client.open_leased_reader(shard)
    state = client.state(shard)
    assert state.upper == Frontier(total)
    state.check_invariants()
    rows = reader.snapshot(total - 1).to_pylist()
    assert sorted((r["writer"], r["seq"]) for r in rows) == sorted(
        (w, s) for w in range(PROCESSES) for s in range(APPENDS)
    )
    assert all(r["_diff"] == 1 for r in rows)
    # A listen from the start sees every append at the time its writer appended it.
    listen = reader.listen(0)
    got: dict[tuple[int, int], int] = {}
    while listen.frontier < Frontier(total):
        for e in listen.next(timeout_s=5):
            if isinstance(e, Updates):
                for r in e.table.to_pylist():
                    got[(r["writer"], r["seq"])] = r["_ts"]
            else:
                assert isinstance(e, Progress)
    first = reader.snapshot(0).to_pylist()
    for r in first:
        got[(r["writer"], r["seq"])] = 0
    for i, r in enumerate(results):
        for seq, t in enumerate(r["successes"]):
            assert got[(i, seq)] == t


@pytest.mark.faults
def test_race_sqlite(tmp_path: Path) -> None:
    race(f"file://{tmp_path / 'blob'}", f"sqlite:///{tmp_path / 'consensus.sqlite'}", tmp_path)


@pytest.mark.faults
@pytest.mark.postgres
def test_race_postgres(tmp_path: Path, postgres_dsn: str) -> None:
    race(f"file://{tmp_path / 'blob'}", postgres_dsn, tmp_path)
