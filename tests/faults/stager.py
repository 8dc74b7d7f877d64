"""Stages a batch and then waits to be killed, never appending.

Usage: stager.py BLOB_URI CONSENSUS_URI SHARD LEASE_MS READY_FILE
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow as pa

from timeshard.location import open_location
from timeshard.persist import PersistClient, PersistConfig

SCHEMA = pa.schema([("k", pa.int64())])


def main() -> None:
    blob_uri, consensus_uri, shard, lease_ms, ready = sys.argv[1:6]
    config = PersistConfig(writer_lease_ms=int(lease_ms))
    writer = PersistClient(open_location(blob_uri, consensus_uri), config).open_writer(
        shard, SCHEMA
    )
    upper = writer.fetch_recent_upper().time
    assert upper is not None
    batch = writer.batch([((i,), upper, 1) for i in range(100)], upper, upper + 1)
    Path(ready).write_text(writer.writer_id + "\n" + "\n".join(p.key for p in batch.parts))
    time.sleep(600)


if __name__ == "__main__":
    main()
