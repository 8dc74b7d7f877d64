"""Holds and leases: the last written time stays readable, leases renew on their own,
an indeterminate append is resolved, a writer can raise the since with its append."""

from __future__ import annotations

import pyarrow as pa
import pytest
from tests.unit.test_persist_handles import Clock

from timeshard import Frontier, Indeterminate, LeaseExpired, SinceError
from timeshard.location import Location, MemoryBlob, MemoryConsensus, VersionedData
from timeshard.location.consensus import CaSResult
from timeshard.persist import Appended, PersistClient, PersistConfig
from timeshard.persist._internal import transitions as tr
from timeshard.persist._internal.machine import Machine

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def make_client(clock: Clock, consensus: MemoryConsensus | None = None, **kw: int) -> PersistClient:
    config = PersistConfig(
        clock=clock,
        backoff_ms=0.0,
        reader_lease_ms=1000,
        writer_lease_ms=1000,
        heartbeat_interval_ms=kw.pop("heartbeat_interval_ms", 0),
        **kw,
    )
    return PersistClient(Location(MemoryBlob(), consensus or MemoryConsensus()), config)


def test_a_reader_holding_at_the_upper_leaves_upper_minus_one_readable() -> None:
    client = make_client(Clock())
    w, r = client.open("s", SCHEMA)
    w.append([(("a", 1), 0, 1), (("b", 2), 3, 1)], 0, 5)
    r.downgrade_since(5)  # a holder that no longer reads anything below 5
    state = client.state("s")
    assert state.since == Frontier(4), state.since
    other = client.open_leased_reader("s")
    assert sorted(x["k"] for x in other.snapshot(4).to_pylist()) == ["a", "b"]
    r.expire()
    other.expire()
    assert client.state("s").since == Frontier(4)  # no holder: the since stays
    w.append([], 5, 9)
    assert client.open_unleased_reader("s").snapshot(4).num_rows == 2


def test_since_of_an_empty_shard_stays_at_zero() -> None:
    client = make_client(Clock())
    _, r = client.open("s", SCHEMA)
    r.downgrade_since(7)
    assert client.state("s").since == Frontier(0)


def test_critical_holds_are_capped_and_can_be_dropped() -> None:
    client = make_client(Clock())
    w = client.open_writer("s", SCHEMA)
    w.append([(("a", 1), 0, 1)], 0, 10)
    hold = client.open_critical_since("s", "view.v", "")
    hold.downgrade_since(20)
    assert client.state("s").since == Frontier(9)
    low = client.open_critical_since("s", "retain", "5000")
    assert low.since == Frontier(9)  # registered at the shard's since
    assert client.drop_critical_since("s", "view.v") is True
    assert client.drop_critical_since("s", "view.v") is False
    assert set(client.state("s").critical_readers) == {"retain"}


def test_since_floor_raises_every_hold_with_the_append() -> None:
    client = make_client(Clock())
    w, r = client.open("s", SCHEMA)
    w.append([(("a", 1), 0, 1)], 0, 2)
    hold = client.open_critical_since("s", "deploy", "0")
    result = w.compare_and_append_batch([w.batch([(("b", 2), 6, 1)], 2, 7)], 2, 7, since_floor=6)
    assert isinstance(result, Appended)
    state = client.state("s")
    assert state.since == Frontier(6)
    assert hold.since == Frontier(6)
    with pytest.raises(SinceError):
        r.snapshot(3)
    assert sorted(x["k"] for x in r.snapshot(6).to_pylist()) == ["a", "b"]


class CommitThenFail(MemoryConsensus):
    """Commits the armed compare-and-set, lets ``meanwhile`` run, then reports it failed."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.meanwhile: list[object] = []

    def compare_and_set(self, key: str, expected: int | None, new: VersionedData) -> CaSResult:
        outcome = super().compare_and_set(key, expected, new)
        if self.armed and outcome is CaSResult.COMMITTED:
            self.armed = False
            for action in self.meanwhile:
                action()  # type: ignore[operator]
            raise Indeterminate("injected: the connection dropped after the commit")
        return outcome


def test_an_indeterminate_append_that_landed_is_appended_even_if_the_lease_is_gone() -> None:
    clock = Clock()
    consensus = CommitThenFail()
    client = make_client(clock, consensus)
    w = client.open_writer("s", SCHEMA)
    batch = w.batch([(("a", 1), 0, 1)], 0, 3)
    other = Machine("s", consensus, client.config)
    consensus.meanwhile = [lambda: other.apply(lambda s: tr.expire_writer(s, w.writer_id))]
    consensus.armed = True
    result = w.compare_and_append_batch([batch], 0, 3)
    assert isinstance(result, Appended), result
    assert client.state("s").upper == Frontier(3)
    assert client.open_unleased_reader("s").snapshot(2).num_rows == 1


def test_an_indeterminate_empty_append_whose_writer_is_gone_is_not_called_expired() -> None:
    consensus = CommitThenFail()
    client = make_client(Clock(), consensus)
    w = client.open_writer("s", SCHEMA)
    other = Machine("s", consensus, client.config)
    consensus.meanwhile = [lambda: other.apply(lambda s: tr.expire_writer(s, w.writer_id))]
    consensus.armed = True
    with pytest.raises(Indeterminate):
        w.compare_and_append_batch([], 0, 3)


def test_an_indeterminate_failure_is_retried_until_the_outcome_is_known() -> None:
    consensus = CommitThenFail()
    client = make_client(Clock(), consensus, max_attempts=2)
    w = client.open_writer("s", SCHEMA)
    failures = {"n": 0}
    original = consensus.head

    def flaky_head(key: str) -> VersionedData | None:
        if consensus.armed is False and failures["n"] < 5:  # after the indeterminate CaS
            failures["n"] += 1
            from timeshard import Determinate

            raise Determinate("injected: head unavailable")
        return original(key)

    consensus.armed = True
    consensus.head = flaky_head  # type: ignore[method-assign]
    result = w.compare_and_append_batch([w.batch([(("a", 1), 0, 1)], 0, 2)], 0, 2)
    assert isinstance(result, Appended)
    assert failures["n"] == 5  # more failures than max_attempts, and still resolved


def test_background_heartbeats_renew_idle_handles_and_report_lost_leases() -> None:
    clock = Clock()
    client = make_client(clock, heartbeat_interval_ms=100)
    w, r = client.open("s", SCHEMA)
    clock.now += 900
    client.heartbeats.renew_due()
    state = client.state("s")
    assert state.writers[w.writer_id].last_heartbeat_ms == clock.now
    assert state.leased_readers[r.reader_id].last_heartbeat_ms == clock.now
    clock.now += 900  # 1800 ms after opening: alive only because of the renewals
    client.gc("s")
    assert w.writer_id in client.state("s").writers
    # A lease that ran out anyway (the process was stopped) is reported, not raised.
    clock.now += 5000
    client.gc("s")
    client.heartbeats.renew_due()
    assert w.lease_lost and r.lease_lost
    with pytest.raises(LeaseExpired):
        w.heartbeat()


def test_a_time_before_the_since_names_the_readable_range() -> None:
    client = make_client(Clock())
    w, r = client.open("s", SCHEMA)
    w.append([(("a", 1), 0, 1)], 0, 10)
    r.downgrade_since(6)
    with pytest.raises(SinceError, match=r"shard 's': it keeps the times \[6, 9\]"):
        r.snapshot(2)
    with pytest.raises(SinceError, match=r"\[6, 9\]"):
        client.open_unleased_reader("s").snapshot(5)


def test_listing_shards_retries_storage_failures() -> None:
    from timeshard import Determinate

    class Flaky(MemoryConsensus):
        failures = 3

        def list_keys(self) -> list[str]:
            if self.failures:
                self.failures -= 1
                raise Determinate("injected: list_keys timed out")
            return super().list_keys()

    client = make_client(Clock(), Flaky())
    client.open_writer("s", SCHEMA)
    assert client.list_shards() == ["s"]


def test_a_listen_whose_times_were_declared_unreadable_stops_with_a_since_error() -> None:
    client = make_client(Clock())
    w, r = client.open("s", SCHEMA)
    w.append([(("a", 1), 0, 1)], 0, 2)
    listen = r.listen(1)
    w.compare_and_append_batch([w.batch([(("b", 2), 5, 1)], 2, 6)], 2, 6, since_floor=5)
    with pytest.raises(SinceError):
        listen.poll()


def test_the_readable_range_of_a_since_error_is_never_backwards() -> None:
    """A reader's since may pass the shard's upper (a since_floor), and a closed shard
    has no last time: the message says what is readable, not [1, -1] or [6, none]."""
    from timeshard.progress import Frontier

    def message(since: Frontier, upper: Frontier) -> str:
        return str(SinceError(0, since, shard_id="s", upper=upper))

    assert "it keeps the times [6, 9] (since [6], upper [10])" in message(Frontier(6), Frontier(10))
    assert "it keeps no readable time (since [1], upper [0])" in message(Frontier(1), Frontier(0))
    assert "it keeps no readable time (since [10], upper [10])" in message(
        Frontier(10), Frontier(10)
    )
    assert "it is empty: nothing is readable yet" in message(Frontier(0), Frontier(0))
    assert "it keeps the times from 6 on (since [6], upper [])" in message(
        Frontier(6), Frontier.empty()
    )
    assert "it keeps no readable time (since [], upper [])" in message(
        Frontier.empty(), Frontier.empty()
    )
