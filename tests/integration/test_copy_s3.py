"""COPY FROM files on S3 (SeaweedFS, started by the tests), through ``timeshard copy``.

The command runs in its own process with the server's AWS environment, as a
user's shell would give it: the driver lists the glob through pyarrow's S3
filesystem, and the tasks read each ``s3a://`` file. A bad row fails the
whole COPY, naming its ``s3a://`` file and line, and nothing is written;
then the good files load at one time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from timeshard.dev.seaweedfs import REGION
from timeshard.location import Location
from timeshard.persist import PersistClient

pytestmark = [pytest.mark.spark, pytest.mark.s3]
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def copy_command(loc: Path, path: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "timeshard", "copy", path),
            *("--into", "orders", "--format", "csv", "--location", str(loc)),
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_copy_a_glob_of_csv_files_on_s3(s3_server: Any, tmp_path: Path) -> None:
    fs = pafs.S3FileSystem(
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
        endpoint_override=s3_server.endpoint,
        region=REGION,
        scheme="http",
    )
    prefix = f"{s3_server.bucket}/copy-{uuid.uuid4().hex[:8]}"
    files = {
        "a.csv": b"k,v\na,1\nb,2\n",
        "b.csv": b"k,v\nc,3\n,4\n",
        "notes.txt": b"not csv at all\n",
    }
    for name, data in files.items():
        with fs.open_output_stream(f"{prefix}/{name}") as out:
            out.write(data)
    loc = tmp_path / "loc"
    client = PersistClient(Location.embedded(loc))
    client.open_writer("orders", SCHEMA).expire()
    glob = f"s3a://{prefix}/*.csv"

    with fs.open_output_stream(f"{prefix}/c.csv") as out:
        out.write(b"k,v\nd,x\n")
    failed = copy_command(loc, glob, s3_server.env())
    assert failed.returncode != 0
    assert f"s3a://{prefix}/c.csv:2" in failed.stdout + failed.stderr, failed.stderr[-2000:]
    assert client.state("orders").upper.time == 0  # nothing written

    fs.delete_file(f"{prefix}/c.csv")
    done = copy_command(loc, glob, s3_server.env())
    assert done.returncode == 0, done.stderr[-3000:]
    state = client.state("orders")
    assert state.upper.time == 1
    reader = client.open_leased_reader("orders")
    rows = sorted(
        (r["k"] or "", r["v"], r["_ts"], r["_diff"]) for r in reader.snapshot(0).to_pylist()
    )
    reader.expire()
    assert rows == [("", 4, 0, 1), ("a", 1, 0, 1), ("b", 2, 0, 1), ("c", 3, 0, 1)]
