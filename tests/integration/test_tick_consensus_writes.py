"""A view tick writes consensus at most three times: the append, and each input's two holds.

A tick appends its batch (one compare-and-set on the view's shard) and
then, at most every ``hold_interval_s``, moves its holds: the deploy hold on
its own shard, and on each input the durable hold and the lease of its reads.
The deploy hold moves with the append, in the same compare-and-set (it
names the append's fence already). The holds on an input are moved on the
input's state as consensus has it, read first: the input's writer appended
since the hold was last moved, so a compare-and-set on the handle's own copy
of the state failed and was tried again (one wasted write per hold). A read
of an input's parts holds the state it read only once its hold lags: it
holds an older one already, which keeps every part of the later ones too.

Compaction and background heartbeats are off (their writes are off the tick
path, on their own threads, and come at times of their own).
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import Location
from timeshard.location.consensus import CaSResult, Consensus
from timeshard.persist import PersistClient, PersistConfig

pytestmark = pytest.mark.spark

DATA = pa.schema([("k", pa.int64()), ("v", pa.int64())])


class Counting:
    """A consensus that counts compare-and-sets by shard and outcome while ``on``."""

    def __init__(self, inner: Consensus) -> None:
        self.inner = inner
        self.on = False
        self.calls: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def compare_and_set(self, key: str, expected: Any, new: Any) -> CaSResult:
        outcome = self.inner.compare_and_set(key, expected, new)
        if self.on:
            with self._lock:
                self.calls[(key, outcome.name)] += 1
        return outcome

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("view", ["linear", "group_sum"])
def test_a_view_tick_writes_consensus_at_most_three_times(
    spark: SparkSession, tmp_path: Path, view: str
) -> None:
    embedded = Location.embedded(tmp_path)
    consensus = Counting(embedded.consensus)
    config = PersistConfig(compaction_enabled=False, heartbeat_interval_ms=0)
    client = PersistClient(Location(embedded.blob, consensus), config)  # type: ignore[arg-type]
    writer = client.open_writer("in_a", DATA)
    writer.append([((k, k), 0, 1) for k in range(50)], 0, 1)
    sql = {
        "linear": "SELECT k, v * 2 AS w FROM a WHERE v >= 0",
        "group_sum": "SELECT k % 5 AS g, count(*) AS n, sum(v) AS s FROM a GROUP BY k % 5",
    }[view]
    mv = MaterializedView.install(
        spark,
        client,
        ViewDefinition("v", {"a": "in_a"}, sql),
        background_io=False,
        check_every_s=None,
    )
    mv.sink.hold_interval_s = 0.0  # the holds move at every tick
    mv.catch_up()
    mv.catch_up()
    upper = 1
    for tick in range(4):
        writer.append([((tick, tick), upper, -1), ((tick, tick + 100), upper, 1)], upper, upper + 1)
        upper += 1
        consensus.calls.clear()
        consensus.on = True
        mv.catch_up()
        consensus.on = False
        calls = dict(consensus.calls)
        assert sum(calls.values()) <= 3, (tick, calls)
        assert not any(outcome != "COMMITTED" for _, outcome in calls), (tick, calls)
    assert client.state("v").critical_readers  # the deploy hold followed the appends:
    held = {r: c.since.time for r, c in client.state("v").critical_readers.items()}
    assert upper - 1 in held.values(), held
    mv.close()
    writer.expire()
