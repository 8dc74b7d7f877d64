"""Materialized views on Spark: correct at every time, refresh, errors, read-only, fencing."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import Location, VersionedData
from timeshard.persist import PersistClient
from timeshard.progress import Frontier

pytestmark = pytest.mark.spark

INPUT = pa.schema([("k", pa.string()), ("v", pa.int64())])
SQL = "SELECT k, count(*) AS n, sum(v) AS s FROM inp GROUP BY k"


def per_key(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """The query over an input snapshot, in Python."""
    groups: dict[str, list[int]] = {}
    for r in rows:
        if r["_err"] is None:
            groups.setdefault(r["k"], []).extend([r["v"]] * r["_diff"])
    return Counter({(k, len(vs), sum(vs), None): 1 for k, vs in groups.items()})


def view_rows(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        out[(r["k"], r["n"], r["s"], r["_err"])] += r["_diff"]
    return Counter({k: v for k, v in out.items() if v})


def write_history(client: PersistClient, start: int = 0, ticks: int = 4) -> int:
    writer = client.open_writer("inp", INPUT)
    upper = writer.fetch_recent_upper().time or 0
    for i in range(start, start + ticks):
        ups = [((f"k{j % 3}", i * 10 + j), upper, 1) for j in range(4)]
        if i > 0:
            ups.append((("k0", (i - 1) * 10), upper, -1))
        writer.append(ups, upper, upper + 2)
        upper += 2
    writer.expire()
    return upper


class CountingConsensus:
    """Counts compare-and-set calls that reach consensus."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.cas = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def compare_and_set(self, key: str, expected: Any, new: VersionedData) -> Any:
        self.cas += 1
        return self.inner.compare_and_set(key, expected, new)


def check_every_time(client: PersistClient, view: str, lo: int, hi: int) -> None:
    inp, out = client.open_leased_reader("inp"), client.open_leased_reader(view)
    for t in range(lo, hi):
        assert view_rows(out.snapshot(t).to_pylist()) == per_key(inp.snapshot(t).to_pylist()), t


def test_sql_view_correct_at_every_time(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    hold = client.open_leased_reader("inp", INPUT)
    upper = write_history(client)
    view = MaterializedView.install(
        spark, client, ViewDefinition("v1", {"inp": "inp"}, SQL), as_of=0
    )
    hold_view = client.open_leased_reader("v1")
    view.catch_up()
    check_every_time(client, "v1", 0, upper)
    parts = view.stats.parts_written
    upper = write_history(client, start=4, ticks=3)
    view.catch_up()
    check_every_time(client, "v1", 0, upper)
    assert view.frontiers().persist.time == upper and view.frontiers().lag_ms == 0
    # Steady state: no input change, no new parts.
    before = view.stats.parts_written
    assert before > parts
    writer = client.open_writer("inp")
    for _ in range(3):
        u = writer.fetch_recent_upper().time or 0
        writer.append([], u, u + 5)
        view.catch_up()
    assert view.stats.parts_written == before
    view.close()
    hold.expire()
    hold_view.expire()


def test_function_view_and_refresh(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    client.open_leased_reader("inp", INPUT)
    upper = write_history(client, ticks=5)

    def fn(frames: Any) -> Any:
        return frames["inp"].groupBy("k").agg({"v": "sum"}).withColumnRenamed("sum(v)", "s")

    view = MaterializedView.install(
        spark,
        client,
        ViewDefinition("refresh4", {"inp": "inp"}, function=fn, refresh_every_ms=4),
        as_of=0,
    )
    client.open_leased_reader("refresh4")
    view.catch_up()
    inp, out = client.open_leased_reader("inp"), client.open_leased_reader("refresh4")
    for t in range(0, upper):
        refresh = t - t % 4
        want: Counter[tuple[Any, ...]] = Counter()
        for (k, _n, s, e), d in per_key(inp.snapshot(refresh).to_pylist()).items():
            want[(k, s, e)] += d
        got: Counter[tuple[Any, ...]] = Counter()
        for r in out.snapshot(t).to_pylist():
            got[(r["k"], r["s"], r["_err"])] += r["_diff"]
        assert Counter({k: v for k, v in got.items() if v}) == want, t
    times = {h["lower"] for h in view.stats.history if h["rows"]}
    assert all(t % 4 == 0 for t in times), times
    view.close()


def test_a_refresh_view_over_an_input_compacted_past_a_refresh_time_starts_at_the_next(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The default as_of was the inputs' since, 13. At 13 a REFRESH EVERY 10 view shows its
    inputs at 10, below their since: every tick failed (SinceError) and it never wrote."""
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("inp", INPUT)
    hold = client.open_leased_reader("inp")
    for t in range(16):
        writer.append([((f"k{t % 3}", t), t, 1)], t, t + 1)
    hold.downgrade_since(13)
    view = MaterializedView.install(
        spark,
        client,
        ViewDefinition("refresh10", {"inp": "inp"}, SQL, refresh_every_ms=10),
        background_io=False,
        check_every_s=None,
    )
    inp = client.open_leased_reader("inp")  # read at 20 once the view has moved on
    out = client.open_leased_reader("refresh10")
    hold.expire()
    assert view.sink.as_of == 20
    for t in range(16, 25):
        writer.append([((f"k{t % 3}", t), t, 1)], t, t + 1)
    assert view.catch_up(timeout_s=120) == Frontier(30), view.sink.last_error
    want = per_key(inp.snapshot(20).to_pylist())
    for t in (20, 29):
        assert view_rows(out.snapshot(t).to_pylist()) == want, t
    view.close()


def test_a_query_failing_over_many_times_is_one_err_row_whatever_the_batches(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The err row of a query that fails on its inputs named the time it was evaluated at:
    a view stepped once per time wrote ``failed at 2``, then ``failed at 3`` (a retraction
    and an insertion per tick), and one that caught up in one batch ``failed at 1``."""
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("inp", INPUT)
    client.open_leased_reader("inp")
    sql = "SELECT k, element_at(array(10, 20), CAST(v AS INT)) AS e FROM inp"
    views = [
        MaterializedView.install(
            spark,
            client,
            ViewDefinition(name, {"inp": "inp"}, sql),
            as_of=0,
            background_io=False,
            check_every_s=None,
        )
        for name in ("each", "once")
    ]
    readers = {v.name: client.open_leased_reader(v.name) for v in views}
    for t, ups in enumerate([[(("a", 1), 0, 1)], [(("b", 5), 1, 1)], [], []]):
        writer.append(ups, t, t + 1)
        views[0].catch_up()
    views[1].catch_up()

    def rows(name: str, t: int) -> Counter[tuple[Any, ...]]:
        out: Counter[tuple[Any, ...]] = Counter()
        for r in readers[name].snapshot(t).to_pylist():
            err = None if r["_err"] is None else r["_err"].replace(repr(name), "V")
            out[(r["k"], r["e"], err)] += r["_diff"]
        return Counter({k: d for k, d in out.items() if d})

    assert rows("each", 0) == Counter({("a", 10, None): 1})
    [(failed, count)] = rows("each", 1).items()
    assert failed[2].startswith("view V failed on its inputs: ") and count == 1, failed
    for t in range(4):
        assert rows("each", t) == rows("once", t), t
    assert rows("each", 3) == rows("each", 1)
    for v in views:
        v.close()


def test_errors_are_data(spark: SparkSession, tmp_path: Path) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    client.open_leased_reader("inp", INPUT)
    writer = client.open_writer("inp", INPUT)
    writer.append([(("a", 1), 0, 1), (("b", 0), 0, 1)], 0, 1)
    writer.append(
        pa.table(
            {
                "k": [None],
                "v": [None],
                "_ts": [1],
                "_diff": [1],
                "_err": ["undecodable record at offset 9"],
            }
        ),
        1,
        2,
    )
    writer.append([(("b", 0), 2, -1), (("b", 5), 2, 1)], 2, 3)
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        # A division the view's rewrite guards (an err row of the row it fails on), and one
        # inside an aggregate, which it does not reach (the whole time is one err row).
        view = MaterializedView.install(
            spark,
            client,
            ViewDefinition("ratio", {"inp": "inp"}, "SELECT k, 10 / v AS r FROM inp"),
            as_of=0,
        )
        client.open_leased_reader("ratio")
        summed = MaterializedView.install(
            spark,
            client,
            ViewDefinition(
                "summed", {"inp": "inp"}, "SELECT k, sum(10 / v) AS r FROM inp GROUP BY k"
            ),
            as_of=0,
        )
        client.open_leased_reader("summed")
        view.catch_up()
        summed.catch_up()
    finally:  # as it was: a later test of this session may need ANSI on (Spark's default)
        spark.conf.set("spark.sql.ansi.enabled", ansi)
    undecodable = (None, None, "undecodable record at offset 9")
    failed = (None, None, "division by zero in 10 / v")
    out = client.open_leased_reader("ratio")
    for t, want in [
        (0, [("a", 10.0, None), failed]),
        (1, [("a", 10.0, None), failed, undecodable]),  # b's division still fails at 1
        (2, [("a", 10.0, None), ("b", 2.0, None), undecodable]),
    ]:
        got = [(r["k"], r["r"], r["_err"]) for r in out.snapshot(t).to_pylist()]
        assert all(r["_diff"] == 1 for r in out.snapshot(t).to_pylist())
        assert sorted(got, key=repr) == sorted(want, key=repr), t
    assert view.stats.query_errors == 0
    view.close()
    out = client.open_leased_reader("summed")
    at0 = out.snapshot(0).to_pylist()
    assert len(at0) == 1 and "DIVIDE_BY_ZERO" in (at0[0]["_err"] or "")
    at1 = out.snapshot(1).to_pylist()  # the division still fails at 1
    assert len(at1) == 1 and "DIVIDE_BY_ZERO" in (at1[0]["_err"] or "")
    at2 = sorted(repr((r["k"], r["r"], r["_err"])) for r in out.snapshot(2).to_pylist())
    assert at2 == sorted(
        repr(x)
        for x in [
            (None, None, "undecodable record at offset 9"),
            ("a", 10.0, None),
            ("b", 2.0, None),
        ]
    )
    assert summed.stats.query_errors >= 1
    summed.close()


def test_read_only_writes_nothing_then_promotes(spark: SparkSession, tmp_path: Path) -> None:
    base = Location.embedded(tmp_path)
    client = PersistClient(base)
    client.open_leased_reader("inp", INPUT)
    upper = write_history(client)
    gen1 = MaterializedView.install(
        spark, client, ViewDefinition("ro", {"inp": "inp"}, SQL), as_of=0, generation=1
    )
    client.open_leased_reader("ro")
    gen1.catch_up()
    leases = {lease.reader_id for lease in gen1.desired._leases.values()}
    assert leases and leases <= set(client.state("inp").leased_readers), "it reads leased"
    counting = CountingConsensus(base.consensus)
    ro_client = PersistClient(Location(base.blob, counting))
    gen2 = MaterializedView.install(
        spark, ro_client, ViewDefinition("ro", {"inp": "inp"}, SQL), read_only=True, generation=2
    )
    upper = write_history(client, start=4, ticks=2)
    for _ in range(4):
        gen2.step()
    assert counting.cas == 0
    assert gen2.frontiers().read_only
    gen2.promote()
    assert counting.cas > 0
    gen2.catch_up()
    check_every_time(client, "ro", 0, upper)
    gen1.step()
    assert gen1.frontiers().read_only, "generation 1 must be fenced by generation 2"
    # Fenced, it holds the input's history no more (it had, for as long as it lived).
    assert not leases & set(client.state("inp").leased_readers)
    gen1.close()
    gen2.close()


def test_a_view_restarted_after_its_inputs_compacted_resumes_at_their_since(
    spark: SparkSession, tmp_path: Path
) -> None:
    """No replica held the inputs while the view was down, and they compacted past its
    upper: a reinstalled view starts at the inputs' since instead of failing forever."""
    client = PersistClient(Location.embedded(tmp_path))
    hold = client.open_leased_reader("inp", INPUT)
    write_history(client)
    definition = ViewDefinition("v3", {"inp": "inp"}, SQL)
    view = MaterializedView.install(spark, client, definition, background_io=False)
    view.catch_up()
    down_at = view.frontiers().persist.time
    view.close()
    client.drop_critical_since("inp", "view.v3")  # the view's durable hold is lost
    upper = write_history(client, start=4, ticks=3)
    assert down_at is not None and upper - 1 > down_at
    hold.downgrade_since(Frontier(upper - 1))
    client.compact("inp")
    view = MaterializedView.install(spark, client, definition, background_io=False)
    assert view.sink.as_of == upper - 1
    hold_view = client.open_leased_reader("v3")
    view.catch_up()
    upper = write_history(client, start=7, ticks=2)
    view.catch_up()
    readable = max(client.state(s).since.time or 0 for s in ("inp", "v3"))
    assert readable < upper - 2
    check_every_time(client, "v3", readable, upper)
    view.close()
    hold.expire()
    hold_view.expire()


class _WatchedLock:
    """A lock that records when a second thread has to wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def __enter__(self) -> _WatchedLock:
        if not self._lock.acquire(blocking=False):
            self.contended.set()
            self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_two_views_evaluated_at_once_each_read_their_own_inputs(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two views name different shards by one alias, ``a``, and are evaluated at the same
    time on one session (two server objects, or a full check beside a tick). The second
    registers its ``a`` while the first's query is about to be analysed: the first must
    still read its own shard, not the frame the second put under that name."""
    from timeshard.compute import view as view_module
    from timeshard.compute.view import SparkViewDesired

    client = PersistClient(Location.embedded(tmp_path))
    for shard, key in (("s1", "one"), ("s2", "two")):
        writer = client.open_writer(shard, INPUT)
        writer.append([((key, 1), 0, 1)], 0, 1)
        writer.expire()
    views = {
        s: SparkViewDesired(spark, client, ViewDefinition(f"v_{s}", {"a": s}, "SELECT k FROM a"))
        for s in ("s1", "s2")
    }
    for v in views.values():  # the query and its columns, known before the race
        assert v.query()

    def keys(df: Any) -> list[str]:
        return sorted(r["k"] for r in df.collect() for _ in range(r["_diff"]))

    watched = _WatchedLock()
    monkeypatch.setattr(view_module, "_EVALUATING", watched, raising=False)
    first = threading.current_thread()
    second: dict[str, Any] = {}
    either = threading.Event()

    def evaluate_second() -> None:
        try:
            second["rows"] = keys(views["s2"].snapshot(0))
        finally:
            either.set()

    real_sql = SparkSession.sql

    def sql(self: SparkSession, query: str, *args: Any, **kwargs: Any) -> Any:
        own = query == views["s1"].query()[0]  # the view's query, its frames registered
        if own and threading.current_thread() is first and "thread" not in second:
            second["thread"] = threading.Thread(target=evaluate_second, daemon=True)
            second["thread"].start()
            waiting = lambda: (watched.contended.wait(), either.set())  # noqa: E731
            threading.Thread(target=waiting, daemon=True).start()
            # The second evaluation either ran to its end or waits for this one's lock.
            assert either.wait(300), "the second evaluation neither finished nor waited"
        return real_sql(self, query, *args, **kwargs)

    monkeypatch.setattr(SparkSession, "sql", sql)
    assert keys(views["s1"].snapshot(0)) == ["one"]
    second["thread"].join(300)
    assert not second["thread"].is_alive(), "the second evaluation is stuck"
    assert second["rows"] == ["two"]
    watched.contended.set()  # ends the watcher thread if the lock was never contended
    for v in views.values():
        v.close()
