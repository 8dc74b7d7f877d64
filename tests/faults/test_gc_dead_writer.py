"""A writer killed between ``batch`` and append leaves blobs that GC removes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from timeshard.location import open_location
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist.config import wall_clock_ms

STAGER = Path(__file__).with_name("stager.py")
SCHEMA = pa.schema([("k", pa.int64())])


@pytest.mark.faults
def test_gc_removes_staged_parts_of_killed_writer(tmp_path: Path) -> None:
    blob_uri = f"file://{tmp_path / 'blob'}"
    consensus_uri = f"sqlite:///{tmp_path / 'consensus.sqlite'}"
    # GC judges leases by the collecting client's clock: frozen before the stager
    # starts, then moved past the stager's 500 ms lease -- however loaded the machine.
    now = {"ms": wall_clock_ms()}
    config = PersistConfig(clock=lambda: now["ms"], heartbeat_interval_ms=0)
    client = PersistClient(open_location(blob_uri, consensus_uri), config)
    writer, reader = client.open("s", SCHEMA)
    writer.append([((-1,), 0, 1)], 0, 1)
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, str(STAGER), blob_uri, consensus_uri, "s", "500", str(ready)]
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text().strip():
            assert proc.poll() is None, "stager exited early"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    dead_writer, *keys = ready.read_text().split("\n")
    assert keys and all((tmp_path / "blob" / k).exists() for k in keys)

    report = client.gc("s")  # the dead writer's lease has not run out: parts kept
    assert report.deleted_blobs == 0
    assert all((tmp_path / "blob" / k).exists() for k in keys)

    now["ms"] = wall_clock_ms() + 60_000  # the stager's lease ran out; ours did not
    report = client.gc("s")
    assert dead_writer in report.expired
    assert report.deleted_blobs == len(keys)
    assert not any((tmp_path / "blob" / k).exists() for k in keys)
    assert [r["k"] for r in reader.snapshot(0).to_pylist()] == [-1]
