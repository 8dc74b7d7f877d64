"""A writer process for the race tests: appends until it has N successes.

Usage: racer.py BLOB_URI CONSENSUS_URI SHARD INDEX N OUT_JSON

Each success is the upper it appended at; they are written to OUT_JSON.
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa

from timeshard.location import open_location
from timeshard.persist import Appended, PersistClient, PersistConfig

SCHEMA = pa.schema([("writer", pa.int64()), ("seq", pa.int64())])


def main() -> None:
    blob_uri, consensus_uri, shard, index, n, out = sys.argv[1:7]
    client = PersistClient(open_location(blob_uri, consensus_uri), PersistConfig(backoff_ms=1.0))
    writer = client.open_writer(shard, SCHEMA)
    successes: list[int] = []
    mismatches = 0
    upper = writer.fetch_recent_upper().time
    assert upper is not None
    while len(successes) < int(n):
        row = ((int(index), len(successes)), upper, 1)
        result = writer.compare_and_append([row], upper, upper + 1)
        if isinstance(result, Appended):
            successes.append(upper)
            upper += 1
        else:
            mismatches += 1
            current = result.current.time
            assert current is not None and current > upper, (current, upper)
            upper = current
    with open(out, "w") as f:
        json.dump({"successes": successes, "mismatches": mismatches}, f)


if __name__ == "__main__":
    main()
