"""Persist over unreliable blob and consensus (5% failures, 5% timeouts).

Every operation either completes or fails determinately; the state is never
corrupt, and what completed is exactly what a reader sees.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from timeshard import Determinate, Frontier, Indeterminate, UpperMismatch
from timeshard.location import (
    Location,
    MemoryBlob,
    MemoryConsensus,
    UnreliableBlob,
    UnreliableConsensus,
)
from timeshard.persist import Appended, PersistClient, PersistConfig

SCHEMA = pa.schema([("k", pa.int64())])


@pytest.mark.parametrize("seed", range(6))
def test_operations_complete_or_fail_determinately(seed: int) -> None:
    blob = UnreliableBlob(MemoryBlob(), seed=seed, fail_rate=0.05, timeout_rate=0.05)
    consensus = UnreliableConsensus(
        MemoryConsensus(), seed=seed + 100, fail_rate=0.05, timeout_rate=0.05
    )
    config = PersistConfig(backoff_ms=0.0, max_backoff_ms=0.0, blob_target_part_rows=4)
    client = PersistClient(Location(blob, consensus), config)
    writer, reader = client.open("s", SCHEMA)
    rng = random.Random(seed)
    log: list[tuple[int, int, int]] = []
    upper = 0
    outcomes: Counter[str] = Counter()
    for _ in range(60):
        op = rng.choice(["append", "append", "append", "snapshot", "compact", "gc", "since"])
        try:
            if op == "append":
                width = rng.randint(1, 3)
                ups = [
                    ((rng.randint(0, 5),), rng.randint(upper, upper + width - 1), 1)
                    for _ in range(rng.randint(0, 6))
                ]
                result = writer.compare_and_append(ups, upper, upper + width)
                assert isinstance(result, Appended), result
                log += [(k[0], t, d) for k, t, d in ups]
                upper += width
            elif op == "snapshot" and upper > 0:
                since = reader.since.time or 0
                as_of = rng.randint(since, upper - 1) if since < upper else None
                if as_of is not None:
                    got = Counter({r["k"]: r["_diff"] for r in reader.snapshot(as_of).to_pylist()})
                    want: Counter[int] = Counter()
                    for k, t, d in log:
                        if t <= as_of:
                            want[k] += d
                    assert got == Counter({k: v for k, v in want.items() if v})
            elif op == "compact":
                writer.compact()
            elif op == "gc":
                client.gc("s")
            elif op == "since" and upper > 1:
                reader.downgrade_since(rng.randint(0, upper - 1))
            outcomes["ok"] += 1
        except Determinate:
            outcomes["determinate"] += 1
        except Indeterminate as e:  # pragma: no cover - the failure this test looks for
            pytest.fail(f"operation {op} ended indeterminately: {e}")
    blob.enabled = False
    consensus.enabled = False
    state = client.state("s")
    state.check_invariants()
    assert state.upper == Frontier(upper)
    final: Counter[Any] = Counter()
    for k, _t, d in log:
        final[k] += d
    if upper > 0:
        got = Counter({r["k"]: r["_diff"] for r in reader.snapshot(upper - 1).to_pylist()})
        assert got == Counter({k: v for k, v in final.items() if v})
    assert outcomes["ok"] > 0


class CommitThenTimeout(MemoryConsensus):
    """Commits the next compare_and_set, then reports it as a timeout."""

    armed = False

    def compare_and_set(self, key: str, expected: Any, new: Any) -> Any:
        result = super().compare_and_set(key, expected, new)
        if self.armed:
            self.armed = False
            raise Indeterminate("injected: committed, then timed out")
        return result


def test_retry_after_indeterminate_append_is_idempotent() -> None:
    """A compare-and-set that committed but reported a timeout is not applied twice."""
    consensus = CommitThenTimeout()
    client = PersistClient(Location(MemoryBlob(), consensus), PersistConfig(backoff_ms=0.0))
    writer, reader = client.open("s", SCHEMA)
    consensus.armed = True
    result = writer.compare_and_append([((1,), 0, 1)], 0, 1)
    assert isinstance(result, Appended) and not consensus.armed
    assert client.state("s").upper == Frontier(1)
    rows = reader.snapshot(0).to_pylist()
    assert [(r["k"], r["_diff"]) for r in rows] == [(1, 1)]
    assert isinstance(writer.compare_and_append([((2,), 0, 1)], 0, 1), UpperMismatch)
