"""``Engine.subscribe`` over a real (in-memory) location: when it reads, and how it waits.

A SUBSCRIBE without AS OF reads at the latest readable time once there is
one: a view just created has written nothing, and its first write may start
its history later (``since_floor``). While it waits it yields heartbeats,
so a cursor's FETCH timeout, a cancel or a client gone ends the wait. No
Spark.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pyarrow as pa
import pytest

from timeshard.location import Location
from timeshard.location.memory import MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.progress import Frontier
from timeshard.server.engine import Engine
from timeshard.server.pgwire import _Cursor
from timeshard.server.statements import SqlError, parse

SCHEMA = pa.schema([("k", pa.string())])


@pytest.fixture
def client() -> PersistClient:
    return PersistClient(Location(MemoryBlob(), MemoryConsensus()))


def engine(client: PersistClient) -> Engine:
    return Engine(SimpleNamespace(), client, follow_s=3600)  # no follower pass in a test


def next_within(rows: object, within_s: float = 60.0) -> object:
    """``next(rows)``, failing if it blocks: a minute tells a wait that never ends from a
    slow machine."""
    out: list[object] = []
    step = threading.Thread(target=lambda: out.append(next(rows)), daemon=True)  # type: ignore[call-overload]
    step.start()
    step.join(within_s)
    assert out, "the SUBSCRIBE blocked instead of yielding a heartbeat"
    return out[0]


def first_row(rows: object, within_s: float = 30.0) -> tuple[object, ...]:
    deadline = time.monotonic() + within_s
    for row in rows:  # type: ignore[attr-defined]
        if row:
            return tuple(row)
        assert time.monotonic() < deadline, "no row came"
    raise AssertionError("the SUBSCRIBE ended")


def test_a_subscribe_to_a_view_before_its_first_write_reads_where_its_history_starts(
    client: PersistClient,
) -> None:
    writer = client.open_writer("v", SCHEMA)  # a view's shard, just created: upper 0
    stream = engine(client).execute(parse("SUBSCRIBE v"))
    rows = iter(stream.rows)
    assert next_within(rows) == ()  # nothing readable yet: a heartbeat, not a failure
    batch = writer.batch([(("a",), 100, 1)], 0, 101)
    writer.compare_and_append_batch([batch], 0, 101, since_floor=100)
    assert first_row(rows) == (100, 1, "a")
    stream.rows.close()  # type: ignore[attr-defined]


def test_a_subscribe_whose_as_of_the_first_write_passes_says_so(client: PersistClient) -> None:
    writer = client.open_writer("v", SCHEMA)
    stream = engine(client).execute(parse("SUBSCRIBE v AS OF 5"))
    rows = iter(stream.rows)
    assert next_within(rows) == ()
    batch = writer.batch([(("a",), 100, 1)], 0, 101)
    writer.compare_and_append_batch([batch], 0, 101, since_floor=100)
    with pytest.raises(SqlError, match="not readable at 5") as raised:
        first_row(rows)
    assert raised.value.sqlstate == "22023"


def test_a_fetch_waiting_for_a_future_as_of_ends_at_its_timeout(client: PersistClient) -> None:
    writer = client.open_writer("v", SCHEMA)
    writer.append([(("a",), 1, 1)], 0, 10)
    stream = engine(client).execute(parse("SUBSCRIBE v AS OF 1000000"))
    cursor = _Cursor(stream.columns, stream.rows, waits=True)
    out: list[list[tuple[object, ...]]] = []
    fetch = threading.Thread(target=lambda: out.append(cursor.fetch(None, 0.0, lambda: None)))
    fetch.start()
    fetch.join(60)  # returns at once; a minute tells a wait that never ends from a slow one
    assert not fetch.is_alive(), "FETCH ... WITH (TIMEOUT '0s') waited for the AS OF"
    assert out == [[]]
    cursor.close()


@pytest.mark.parametrize(
    ("sql", "written"),
    [("SUBSCRIBE v", True), ("SUBSCRIBE v", False), ("SUBSCRIBE v UP TO 1000", True)],
)
def test_a_subscribe_whose_relation_is_dropped_ends_naming_it(
    client: PersistClient, sql: str, written: bool
) -> None:
    """DROP closes the relation's shard: the SUBSCRIBE went on yielding heartbeats for
    ever, holding its readers."""
    writer = client.open_writer("v", SCHEMA)
    if written:
        writer.append([(("a",), 0, 1)], 0, 1)
    rows = iter(engine(client).execute(parse(sql)).rows)
    if written:
        assert first_row(rows) == (0, 1, "a")
    else:
        assert next_within(rows) == ()
    client.close_shard("v")  # what DROP does to it
    deadline = time.monotonic() + 30
    with pytest.raises(SqlError, match="underlying relation 'v' was dropped") as ended:
        for _ in rows:
            assert time.monotonic() < deadline, "the SUBSCRIBE went on after its relation closed"
    assert ended.value.sqlstate == "42P01"
    assert client.state("v").leased_readers == {}
    writer.expire()


def test_the_since_advances_behind_a_running_subscribe(client: PersistClient) -> None:
    """The SUBSCRIBE's first reader held the shard's since at its start time for as long
    as it ran: with 50 times read, the since stayed at 0."""
    writer = client.open_writer("v", SCHEMA)
    writer.append([(("a",), 0, 1)], 0, 1)
    rows = iter(engine(client).execute(parse("SUBSCRIBE v")).rows)
    assert first_row(rows) == (0, 1, "a")
    for t in range(1, 50):
        writer.append([((f"x{t}",), t, 1)], t, t + 1)
    assert [first_row(rows) for _ in range(1, 50)][-1] == (49, 1, "x49")
    next_within(rows)  # the listen's progress past 49
    assert len(client.state("v").leased_readers) == 1  # the listen's
    assert client.state("v").since == Frontier(49)
    rows.close()  # type: ignore[attr-defined]
    writer.expire()


def all_rows(rows: object, within_s: float = 60.0) -> list[tuple[object, ...]]:
    """Every row until the SUBSCRIBE ends, failing if it does not end: a minute tells a
    SUBSCRIBE that never ends from a slow machine."""
    out: list[tuple[object, ...]] = []
    done: list[bool] = []

    def drain() -> None:
        out.extend(tuple(r) for r in rows if r)  # type: ignore[attr-defined]
        done.append(True)

    step = threading.Thread(target=drain, daemon=True)
    step.start()
    step.join(within_s)
    assert done, f"the SUBSCRIBE did not end; it gave {out}"
    return out


@pytest.mark.parametrize(
    ("upper", "sql", "want"),
    [
        # UP TO is exclusive, as Materialize's: the updates at times < 3, and it ends
        # once the frontier reaches 3 (all times < 3 are then known).
        (4, "SUBSCRIBE v AS OF 1 UP TO 3", [(1, 1, "a"), (1, 1, "z"), (2, 1, "b")]),
        (3, "SUBSCRIBE v AS OF 1 UP TO 3", [(1, 1, "a"), (1, 1, "z"), (2, 1, "b")]),
        (4, "SUBSCRIBE v AS OF 0 UP TO 1", [(0, 1, "z")]),
        # UP TO <= AS OF: no rows, and it completes (without waiting for the AS OF).
        (4, "SUBSCRIBE v AS OF 3 UP TO 3", []),
        (4, "SUBSCRIBE v AS OF 2 UP TO 1", []),
        (4, "SUBSCRIBE v AS OF 100 UP TO 50", []),
        (4, "SUBSCRIBE v UP TO 3", []),  # read at 3, the latest readable time
    ],
)
def test_up_to_is_exclusive(
    client: PersistClient, upper: int, sql: str, want: list[tuple[object, ...]]
) -> None:
    writer = client.open_writer("v", SCHEMA)
    updates = [(("z",), 0, 1), (("a",), 1, 1), (("b",), 2, 1), (("c",), 3, 1)]
    writer.append([u for u in updates if u[1] < upper], 0, upper)
    stream = engine(client).execute(parse(sql))
    assert all_rows(stream.rows) == want
    assert client.state("v").leased_readers == {}
    writer.expire()
