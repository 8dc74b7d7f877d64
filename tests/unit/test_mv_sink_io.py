"""The sink's I/O worker: FIFO order, stage before append, overlap with the tick loop."""

from __future__ import annotations

import threading
import time
from typing import Any

import pyarrow as pa

from timeshard import Frontier
from timeshard.compute import ArrowEngine, IoWorker, Mint, MvSink
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.progress import Description

SCHEMA = pa.schema([("k", pa.string())])


def test_io_worker_runs_commands_in_order() -> None:
    worker = IoWorker("test")
    seen: list[int] = []
    futures = []
    for i in range(50):

        def command(i: int = i) -> int:
            time.sleep(0.001 * (i % 3))
            seen.append(i)
            return i

        futures.append(worker.submit(command))
    assert [f.result() for f in futures] == list(range(50))
    assert seen == list(range(50))
    worker.close()


def test_mint_lowers_strictly_increase() -> None:
    mint = Mint()
    assert mint.mint(True, Frontier(5), Frontier(0)) is None  # read-only
    assert mint.mint(False, Frontier(0), Frontier(0)) is None  # desired not ahead
    assert mint.mint(False, Frontier(5), Frontier(0)) == Description(Frontier(0), Frontier(5))
    assert mint.mint(False, Frontier(9), Frontier(0)) is None  # persist has not moved
    assert mint.mint(False, Frontier(9), Frontier(5)) == Description(Frontier(5), Frontier(9))
    mint.failed()
    assert mint.mint(False, Frontier(9), Frontier(5)) == Description(Frontier(5), Frontier(9))


class Desired:
    def __init__(self) -> None:
        self.upper = 1

    def frontier(self) -> Frontier:
        return Frontier(self.upper)

    def change_times(self, lower: int, upper: int) -> list[int]:
        return list(range(lower, upper))

    def snapshot(self, t: int) -> pa.Table:
        return pa.table({"k": [f"row-{t}"], "_diff": [1], "_err": pa.nulls(1, pa.string())})

    def error_snapshot(self, t: int, error: BaseException) -> pa.Table:
        raise AssertionError(error)


def test_stage_precedes_append_and_ticks_overlap_io() -> None:
    """While a slow stage runs on the worker, the tick loop keeps evaluating desired."""
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig())
    client.open_writer("v", SCHEMA).expire()
    events: list[str] = []
    release = threading.Event()

    def slow_stage(writer: Any, updates: Any, desc: Description) -> Any:
        events.append(f"stage {desc.lower.time}")
        release.wait(5)
        return writer.batch(updates, desc.lower, desc.upper)

    desired = Desired()
    sink = MvSink(client, "v", SCHEMA, desired, ArrowEngine(), 0, stage=slow_stage)
    original = sink._writer.compare_and_append_batch  # type: ignore[union-attr]

    def traced(batches: Any, lower: Any, upper: Any, **kw: Any) -> Any:
        events.append(f"append {lower.time}")
        return original(batches, lower, upper, **kw)

    sink._writer.compare_and_append_batch = traced  # type: ignore[union-attr,method-assign]
    assert sink.step() == Description(Frontier(0), Frontier(1))
    desired.upper = 4
    assert sink.step() is None  # the first append is in flight: nothing new is minted
    assert sorted(sink._buffer) == [0, 1, 2, 3]  # but desired was evaluated meanwhile
    release.set()
    sink.run_until(Frontier(4))
    assert events == ["stage 0", "append 0", "stage 1", "append 1"]
    rows = client.open_leased_reader("v").snapshot(3).to_pylist()
    assert [r["k"] for r in rows] == ["row-3"]
    sink.close()
