"""The sink under faults and restarts (no Spark): holds, recovery, as_of bumps, history.

The view here is the identity over one input shard, computed with pyarrow, so
that what the view must hold at every time is the input's snapshot there.
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest

from timeshard import Frontier, SinceError
from timeshard.compute import ArrowEngine, MvSink
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig
from timeshard.persist._internal import transitions as tr
from timeshard.persist._internal.machine import Machine
from timeshard.persist.holds import RETAIN_READER, view_hold_id
from timeshard.progress import Description

SCHEMA = pa.schema([("k", pa.string())])


class Identity:
    """Desired = the input shard, read with pyarrow; ``fail`` raises instead, once per entry."""

    def __init__(self, client: PersistClient, shard: str) -> None:
        self.reader = client.open_unleased_reader(shard)
        self.fail: list[BaseException] = []

    def frontier(self) -> Frontier:
        return self.reader.upper()

    def change_times(self, lower: int, upper: int) -> list[int]:
        return self.reader.change_times(lower, upper)

    def snapshot(self, t: int) -> pa.Table:
        if self.fail:
            raise self.fail.pop(0)
        return self.reader.snapshot(t).drop_columns(["_ts"])

    def error_snapshot(self, t: int, error: BaseException) -> pa.Table:
        raise AssertionError(f"no failure here follows from the data: {error!r}")


def setup(clock_ms: int = 0) -> tuple[PersistClient, Any]:
    client = PersistClient(
        Location(MemoryBlob(), MemoryConsensus()),
        PersistConfig(backoff_ms=0.0, heartbeat_interval_ms=0),
    )
    writer = client.open_writer("inp", SCHEMA)
    client.open_critical_since("inp", "test", "")  # keeps the input's history to compare
    client.open_writer("v", SCHEMA).expire()
    client.open_critical_since("v", "test", "")  # and the view's
    return client, writer


def write(writer: Any, start: int, ticks: int) -> int:
    for t in range(start, start + ticks):
        writer.append([((f"row{t}",), t, 1)], t, t + 1)
    return start + ticks


def sink(client: PersistClient, desired: Identity, as_of: int = 0, **kw: Any) -> MvSink:
    return MvSink(client, "v", SCHEMA, desired, ArrowEngine(), as_of, input_shards=("inp",), **kw)


def view_rows(client: PersistClient, t: int) -> list[str]:
    return sorted(r["k"] for r in client.open_unleased_reader("v").snapshot(t).to_pylist())


def check_every_time(client: PersistClient, first: int, upper: int) -> None:
    inp = client.open_unleased_reader("inp")
    for t in range(first, upper):
        assert view_rows(client, t) == sorted(r["k"] for r in inp.snapshot(t).to_pylist()), t


def test_a_caught_up_view_leaves_its_input_readable_and_holds_it_durably() -> None:
    client, writer = setup()
    upper = write(writer, 0, 5)
    s = sink(client, Identity(client, "inp"), background_io=False)
    s.run_until(Frontier(upper))
    state = client.state("inp")
    assert state.since.less_equal(upper - 1), state.since  # readable at upper - 1
    hold = state.critical_readers[view_hold_id("v")]
    assert hold.since == Frontier(upper - 1)  # where a restart reads, not further
    s.close()
    state = client.state("inp")
    assert view_hold_id("v") in state.critical_readers  # stays while the view is stopped
    assert not state.leased_readers and not client.state("v").writers
    client.open_unleased_reader("inp").snapshot(upper - 1)


def test_drop_releases_the_holds() -> None:
    client, writer = setup()
    write(writer, 0, 3)
    s = sink(client, Identity(client, "inp"), background_io=False, retain_history_ms=10)
    s.run_until(Frontier(3))
    s.drop()
    assert set(client.state("inp").critical_readers) == {"test"}
    assert RETAIN_READER not in client.state("v").critical_readers


def test_dropping_a_view_from_a_sink_that_never_wrote_releases_its_holds() -> None:
    """The view's durable holds are the view's, not the one sink's that opened them."""
    client, writer = setup()
    write(writer, 0, 3)
    s = sink(client, Identity(client, "inp"), background_io=False, retain_history_ms=10)
    s.run_until(Frontier(3))
    s.close()  # the writing process stops; its holds stay for the view
    standby = sink(client, Identity(client, "inp"), background_io=False, read_only=True)
    standby.drop()
    assert set(client.state("inp").critical_readers) == {"test"}
    assert set(client.state("v").critical_readers) == {"test"}


@pytest.mark.parametrize("background_io", [False, True])
@pytest.mark.parametrize(
    "fault",
    [RuntimeError("injected in stage"), OSError("part moved away"), RuntimeError()],
    ids=repr,
)
def test_any_failure_is_recovered_on_a_later_tick(background_io: bool, fault: Exception) -> None:
    client, writer = setup()
    write(writer, 0, 2)
    failures = [fault]

    def stage(w: Any, updates: Any, d: Description) -> Any:
        if failures:
            raise failures.pop()
        return w.batch(updates, d.lower, d.upper)

    s = sink(client, Identity(client, "inp"), background_io=background_io, stage=stage)
    upper = write(writer, 2, 2)
    s.run_until(Frontier(upper), timeout_s=30)
    assert s.stats.failures == 1 and s.last_error is None
    check_every_time(client, 0, upper)
    s.close()


def test_a_fault_while_evaluating_is_retried_not_written() -> None:
    client, writer = setup()
    upper = write(writer, 0, 3)
    desired = Identity(client, "inp")
    desired.fail = [OSError("an input part is missing"), RuntimeError("py4j: connection reset")]
    s = sink(client, desired, background_io=False)
    s.step()
    assert s.last_error and "missing" in s.last_error
    assert client.state("v").upper == Frontier(0)  # nothing was written
    s.run_until(Frontier(upper))
    check_every_time(client, 0, upper)
    assert s.stats.query_errors == 0


def test_a_writer_whose_lease_ran_out_is_reopened() -> None:
    client, writer = setup()
    write(writer, 0, 2)
    s = sink(client, Identity(client, "inp"), background_io=False)
    s.run_until(Frontier(2))
    assert s._writer is not None
    gone = s._writer.writer_id
    Machine("v", client.location.consensus, client.config).apply(
        lambda st: tr.expire_writer(st, gone)
    )
    upper = write(writer, 2, 3)
    s.run_until(Frontier(upper), timeout_s=30)
    assert s.stats.failures >= 1
    assert gone not in client.state("v").writers
    check_every_time(client, 0, upper)


def test_resuming_past_a_compacted_input_hides_the_times_no_query_produced() -> None:
    client, writer = setup()
    write(writer, 0, 2)
    s = sink(client, Identity(client, "inp"), background_io=False)
    s.run_until(Frontier(2))
    s.close()
    watcher = client.open_leased_reader("v")  # a user reading the view at old times
    client.drop_critical_since("inp", view_hold_id("v"))  # the hold is lost
    client.drop_critical_since("inp", "test")
    upper = write(writer, 2, 4)
    inp_hold = client.open_critical_since("inp", "other", "")
    inp_hold.downgrade_since(upper - 1)
    client.compact("inp")
    as_of = upper - 1
    s = sink(client, Identity(client, "inp"), as_of=as_of, background_io=False)
    s.run_until(Frontier(upper))
    assert client.state("v").since == Frontier(as_of)
    for t in range(2, as_of):  # the view was never computed there
        with pytest.raises(SinceError):
            watcher.snapshot(t)
    check_every_time(client, as_of, upper)


def test_retained_history_keeps_old_times_readable() -> None:
    client, writer = setup()
    client.drop_critical_since("v", "test")  # the retention alone holds the view
    s = sink(client, Identity(client, "inp"), background_io=False, retain_history_ms=3)
    upper = write(writer, 0, 10)
    s.run_until(Frontier(upper))
    client.compact("v")
    state = client.state("v")
    assert state.critical_readers[RETAIN_READER].opaque == "3"
    assert state.since == Frontier(upper - 1 - 3)
    check_every_time(client, upper - 1 - 3, upper)
    with pytest.raises(SinceError):
        client.open_unleased_reader("v").snapshot(upper - 1 - 4)


class CountingConsensus(MemoryConsensus):
    """Counts the compare-and-sets the tick thread makes (background compaction aside)."""

    cas = 0
    thread = threading.get_ident()

    def compare_and_set(self, key: str, expected: Any, new: Any) -> Any:
        self.cas += threading.get_ident() == self.thread
        return super().compare_and_set(key, expected, new)


def test_a_tick_commits_one_compare_and_set_and_the_holds_catch_up_on_close() -> None:
    consensus = CountingConsensus()
    client = PersistClient(
        Location(MemoryBlob(), consensus), PersistConfig(backoff_ms=0.0, heartbeat_interval_ms=0)
    )
    writer = client.open_writer("inp", SCHEMA)
    client.open_writer("v", SCHEMA).expire()
    upper = write(writer, 0, 2)
    s = sink(client, Identity(client, "inp"), background_io=False, hold_interval_s=3600.0)
    s.run_until(Frontier(upper))  # the first append moves the holds at once
    for _ in range(3):
        upper = write(writer, upper, 1)
        # A compaction the last append started may still be committing: the append would
        # then lose that race once and try again (a second compare-and-set, not the tick's).
        assert s._writer is not None and s._writer.compactor.wait_idle(60)
        before = consensus.cas
        s.run_until(Frontier(upper))
        assert consensus.cas - before == 1  # the append; the holds wait
    hold = client.state("inp").critical_readers[view_hold_id("v")]
    assert hold.since < Frontier(upper - 1)  # lagging, which only keeps more readable
    s.close()
    hold = client.state("inp").critical_readers[view_hold_id("v")]
    assert hold.since == Frontier(upper - 1)
