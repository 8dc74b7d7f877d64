"""DROP closes the dropped object's shards: its name is unknown to reads from then on, no
writer appends to it again, and a CREATE of the name is refused.

Without this, a dropped view stayed readable under its name, and a view created again
under it resumed from the old shard: right after CREATE (and AS OF its recorded start)
it read the old query's rows, and a FILE source created again resumed from the old
byte offsets. No Spark: the engine's view builder is stubbed, as in
``test_catalog_claims.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from tests.unit.test_catalog_claims import Built, engine, run

import timeshard.compute as compute
import timeshard.controller as controller
from timeshard.catalog import read_catalog, record_view
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.statements import SqlError, parse


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    return PersistClient(Location.embedded(tmp_path / "loc"))


def test_a_dropped_view_is_unknown_to_reads_and_its_name_is_not_used_again(
    client: PersistClient,
) -> None:
    writer = client.open_writer("v", pa.schema([("one", pa.int64())]))  # the view's shard
    writer.append([((1,), 0, 1)], 0, 5)
    record_view(client, compute.ViewDefinition("v", {"t": "t"}, "SELECT 1 AS one FROM t"), 0)
    served = engine(client)
    built = Built(served)
    try:
        run(served, "CREATE MATERIALIZED VIEW v AS SELECT 1 AS one FROM t")
        assert served.resolve("SELECT * FROM v")[1] == {"v": "v"}
        run(served, "DROP MATERIALIZED VIEW v")
        for read in ("SELECT * FROM v", "SUBSCRIBE v"):
            with pytest.raises(SqlError, match="'v' was dropped") as unknown:
                served.execute(parse(read))
            assert unknown.value.sqlstate == "42P01"
        with pytest.raises(SqlError, match="a name is not used twice") as taken:
            run(served, "CREATE MATERIALIZED VIEW v AS SELECT 2 AS one FROM t")
        assert taken.value.sqlstate == "42710" and built.names == ["v"]
        late = writer.compare_and_append([((2,), 5, 1)], 5, 6)  # a writer still running
        assert late.current.is_empty()  # type: ignore[union-attr]
    finally:
        writer.expire()
        served.close()


def test_a_dropped_sink_lets_go_of_its_input_and_its_name_cannot_resume_elsewhere(
    client: PersistClient, tmp_path: Path
) -> None:
    """DROP SINK only closed the export: its hold kept the input from compacting for ever,
    and a sink created again under the name went on from the old target's progress."""
    writer = client.open_writer("v", pa.schema([("one", pa.int64())]))  # upper 0: no Spark
    served = engine(client)
    try:
        run(served, f"CREATE SINK s FROM v INTO DELTA (URI '{tmp_path / 'd'}') KEY (one)")
        assert served.objects["s"].runner.step().status == "idle"
        assert "export.s" in client.state("v").critical_readers
        run(served, "DROP SINK s")
        assert "export.s" not in client.state("v").critical_readers
    finally:
        writer.expire()
        served.close()


def test_a_second_sink_into_one_table_is_refused(client: PersistClient, tmp_path: Path) -> None:
    """Two sinks' rows and progress in one table overwrite each other (the run file refused
    it; serve did not)."""
    writer = client.open_writer("v", pa.schema([("one", pa.int64())]))
    served = engine(client)
    try:
        run(served, f"CREATE SINK a FROM v INTO DELTA (URI '{tmp_path / 'd'}') KEY (one)")
        with pytest.raises(SqlError, match="sink 'a' writes that table") as taken:
            run(served, f"CREATE SINK b FROM v INTO DELTA (URI '{tmp_path / 'd'}') KEY (one)")
        assert taken.value.sqlstate == "42710"
        run(served, f"CREATE SINK c FROM v INTO DELTA (URI '{tmp_path / 'e'}') KEY (one)")
    finally:
        writer.expire()
        served.close()


class SlowViews:
    """A stub of ``MaterializedView.install``: it creates the view's shard, and a view
    named in ``held`` waits once, in install or in drop, until ``go`` is set (a sink, in
    ``build_export`` if the test makes it wait)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.held: set[str] = set()
        self.waiting = threading.Event()
        self.go = threading.Event()
        monkeypatch.setattr(compute.MaterializedView, "install", self.install)

    def wait(self, name: str) -> None:
        if name in self.held:  # once
            self.held.discard(name)
            self.waiting.set()
            assert self.go.wait(60), "never let go"

    def install(self, spark: Any, client: PersistClient, definition: Any, **_: Any) -> Any:
        self.wait(definition.name)
        client.open_writer(definition.name, pa.schema([("one", pa.int64())])).expire()
        name = definition.name
        return SimpleNamespace(close=lambda: None, drop=lambda: self.wait(name), step=lambda: None)


def in_thread(action: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run_it() -> None:
        try:
            action()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run_it, daemon=True)
    thread.start()
    return thread, errors


@pytest.mark.parametrize(
    "reader",
    [
        "CREATE MATERIALIZED VIEW w AS SELECT one FROM v",
        "CREATE SINK w FROM v INTO DELTA (URI '{tmp}') KEY (one)",
    ],
)
def test_an_object_read_by_one_being_created_is_not_dropped(
    client: PersistClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """While ``w``, reading ``v``, was being built (not yet one of the objects), DROP of
    ``v`` without CASCADE succeeded: ``w`` was installed reading a closed shard, and its
    recorded statement failed on a restart."""
    client.open_writer("t", pa.schema([("one", pa.int64())])).append([((1,), 0, 1)], 0, 5)
    views = SlowViews(monkeypatch)
    served = engine(client)
    build_export = controller.build_export

    def slow_export(spark: Any, client: PersistClient, spec: Any) -> Any:
        views.wait(spec.name)
        return build_export(spark, client, spec)

    monkeypatch.setattr(controller, "build_export", slow_export)
    try:
        run(served, "CREATE MATERIALIZED VIEW v AS SELECT one FROM t")
        views.held.add("w")
        creating, failed = in_thread(lambda: run(served, reader.format(tmp=tmp_path / "d")))
        assert views.waiting.wait(60)
        for drop in ("DROP MATERIALIZED VIEW v", "DROP MATERIALIZED VIEW v CASCADE"):
            with pytest.raises(SqlError, match="'w', being created, reads it") as refused:
                run(served, drop)
            assert refused.value.sqlstate == "2BP01"
        views.go.set()
        creating.join(60)
        assert not failed and set(served.objects) == {"v", "w"}
        assert not client.state("v").upper.is_empty()
    finally:
        views.go.set()
        served.close()


def test_a_name_being_dropped_is_not_created_again(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CREATE of ``v`` while DROP of ``v`` was between forgetting its statement and closing
    its shard succeeded on the old shard, which the DROP then closed under the new ``v``."""
    client.open_writer("t", pa.schema([("one", pa.int64())])).append([((1,), 0, 1)], 0, 5)
    views = SlowViews(monkeypatch)
    served = engine(client)
    try:
        run(served, "CREATE MATERIALIZED VIEW v AS SELECT one FROM t")
        views.held.add("v")
        dropping, failed = in_thread(lambda: run(served, "DROP MATERIALIZED VIEW v"))
        assert views.waiting.wait(60)
        with pytest.raises(SqlError, match="'v' is being dropped") as refused:
            run(served, "CREATE MATERIALIZED VIEW v AS SELECT one + 1 AS one FROM t")
        assert refused.value.sqlstate == "42710"
        with pytest.raises(SqlError, match="'v' is being dropped") as refused:
            run(served, "CREATE MATERIALIZED VIEW w AS SELECT one FROM v")
        assert refused.value.sqlstate == "42P01"
        views.go.set()
        dropping.join(60)
        assert not failed and served.objects == {}
        assert not [e for e in read_catalog(client) if e.kind == "statement"]
    finally:
        views.go.set()
        served.close()


def test_a_view_whose_input_another_server_drops_while_it_is_built_is_not_created(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another server's DROP closes the input while this one installs ``w``: the CREATE
    fails and records nothing (``w`` ran on a closed input, and failed on a restart)."""
    client.open_writer("v", pa.schema([("one", pa.int64())])).append([((1,), 0, 1)], 0, 5)
    views = SlowViews(monkeypatch)
    served = engine(client)
    try:
        views.held.add("w")
        creating, failed = in_thread(
            lambda: run(served, "CREATE MATERIALIZED VIEW w AS SELECT one FROM v")
        )
        assert views.waiting.wait(60)
        client.close_shard("v")
        views.go.set()
        creating.join(60)
        assert [str(e) for e in failed] == ["relation 'v' was dropped"]
        assert isinstance(failed[0], SqlError) and failed[0].sqlstate == "42P01"
        assert served.objects == {}
        assert not [e for e in read_catalog(client) if e.kind == "statement"]
    finally:
        views.go.set()
        served.close()


def test_a_drop_that_fails_part_way_leaves_no_victim_ticking(client: PersistClient) -> None:
    """Each victim was halted only when its turn came: a failure dropping the first left
    the others out of ``objects`` but ticking, and a follower pass would run a second
    runner of each beside it."""
    served = engine(client)
    Built(served)
    try:
        run(served, "CREATE MATERIALIZED VIEW v AS SELECT 1 AS one FROM t")
        run(served, "CREATE MATERIALIZED VIEW w AS SELECT one FROM v")
        v, w = served.objects["v"], served.objects["w"]
        w.reads = ["v"]  # the stub builder records no inputs

        def unreachable() -> None:
            raise OSError("consensus unreachable")

        w.runner.drop = unreachable  # w, the reader, is dropped first
        with pytest.raises(OSError, match="consensus unreachable"):
            run(served, "DROP MATERIALIZED VIEW v CASCADE")
        assert w.stop.is_set() and v.stop.is_set()
    finally:
        served.close()


def test_a_cascade_that_fails_part_way_is_completed_by_its_retry(client: PersistClient) -> None:
    """A failure dropping ``w`` (the reader, dropped first) had already forgotten its
    statement: ``w`` was neither an object nor recorded, its holds and shard stayed for
    good, and ``v`` -- recorded, but no longer an object -- could not be dropped again
    (42P01) until a follower pass ran it once more."""
    for shard in ("v", "w"):  # the stub builder makes no shard
        client.open_writer(shard, pa.schema([("one", pa.int64())])).expire()
    served = engine(client)
    Built(served)
    try:
        run(served, "CREATE MATERIALIZED VIEW v AS SELECT 1 AS one FROM t")
        run(served, "CREATE MATERIALIZED VIEW w AS SELECT one FROM v")
        w = served.objects["w"]
        w.reads = ["v"]  # the stub builder records no inputs
        drops: list[str] = []

        def unreachable_once() -> None:
            drops.append("w")
            if len(drops) == 1:
                raise OSError("consensus unreachable")

        w.runner.drop = unreachable_once
        with pytest.raises(OSError, match="consensus unreachable"):
            run(served, "DROP MATERIALIZED VIEW v CASCADE")
        recorded = {e.name for e in read_catalog(client) if e.kind == "statement"}
        assert recorded == {"v", "w"} and set(served.objects) == {"v", "w"}
        assert "DROP" in (served.objects["w"].last_error or "")
        assert not client.state("v").upper.is_empty()  # its reader is not dropped yet
        run(served, "DROP MATERIALIZED VIEW v CASCADE")
        assert drops == ["w", "w"] and served.objects == {}
        assert not [e for e in read_catalog(client) if e.kind == "statement"]
        assert client.state("v").upper.is_empty() and client.state("w").upper.is_empty()
    finally:
        served.close()


def drop_cut_short_after_its_mark(client: PersistClient) -> None:
    """serve's view ``w`` over shard ``v`` (its statement, catalog entry and hold on ``v``),
    whose DROP marked its shard and then crashed."""
    from timeshard.catalog import Catalog
    from timeshard.compute.mv_sink import mark_dropped
    from timeshard.persist.holds import view_hold_id

    schema = pa.schema([("one", pa.int64())])
    client.open_writer("v", schema).append([((1,), 0, 1)], 0, 5)
    client.open_writer("w", schema).expire()
    sql = "CREATE MATERIALIZED VIEW w AS SELECT one FROM v"
    Catalog(client, lambda: 1).record_statement("w", {"sql": sql, "seq": 1, "object": "view"})
    record_view(client, compute.ViewDefinition("w", {"v": "v"}, "SELECT one FROM v"), 0)
    client.open_critical_since("v", view_hold_id("w"), "")
    mark_dropped(client, "w")


@pytest.mark.parametrize("closed", [True, False], ids=["after_the_close", "before_the_close"])
def test_a_restart_finishes_a_view_drop_that_a_crash_cut_short(
    client: PersistClient, closed: bool
) -> None:
    """A crash after the view's shard was closed, before its statement was forgotten: the
    restart failed to restore it ("was dropped"), every time, and nothing could DROP it
    or release its hold on its input. So too a crash after the drop marked the shard's
    deploy hold and before the shard closed: the restore's promotion was refused ("its
    drop began"), the name failed for good, and DROP answered 42P01 (review)."""
    from timeshard.compute.mv_sink import DEPLOY_READER
    from timeshard.persist.holds import view_hold_id

    drop_cut_short_after_its_mark(client)
    if closed:
        client.close_shard("w")  # where the crash came
    served = engine(client)
    try:
        assert served.start() == []
        assert served.objects == {}
        assert not [e for e in read_catalog(client) if e.kind == "statement"]
        assert view_hold_id("w") not in client.state("v").critical_readers
        assert client.state("w").upper.is_empty()
        assert DEPLOY_READER not in client.state("w").critical_readers
    finally:
        served.close()


def test_a_restart_finishing_a_drop_releases_the_input_holds_before_the_deploy_hold(
    client: PersistClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A promotion that finds the shard closed tells a dropped view from a complete one by
    that order (every drop releases the input holds first). Finishing a drop released the
    deploy hold first: a promotion registering a fresh hold meanwhile found the input
    holds still there, took the view for complete and kept it (review of 911306d)."""
    from timeshard.compute.mv_sink import DEPLOY_READER
    from timeshard.persist.holds import view_hold_id

    drop_cut_short_after_its_mark(client)
    released: list[tuple[str, str]] = []
    drop = client.drop_critical_since

    def recorded(shard: str, reader: str) -> Any:
        released.append((shard, reader))
        return drop(shard, reader)

    monkeypatch.setattr(client, "drop_critical_since", recorded)
    served = engine(client)
    try:
        assert served.start() == []
    finally:
        served.close()
    order = [r for r in released if r in {("v", view_hold_id("w")), ("w", DEPLOY_READER)}]
    assert order[0] == ("v", view_hold_id("w")), released
    assert ("w", DEPLOY_READER) in order, released


def test_a_complete_view_is_restored_not_dropped_at_a_restart(client: PersistClient) -> None:
    """A view whose inputs all closed has a closed shard too, whose deploy hold keeps its
    generation: a restart took it for a drop cut short, forgot its statement (the view
    vanished) and, since f18221b, released its holds (review)."""
    from timeshard.catalog import Catalog
    from timeshard.compute.mv_sink import DEPLOY_READER

    schema = pa.schema([("one", pa.int64())])
    client.open_writer("v", schema).append([((1,), 0, 1)], 0, 5)
    client.close_shard("v")  # its input closed: the view completes
    client.open_writer("w", schema).append([((1,), 0, 1)], 0, 5)
    sql = "CREATE MATERIALIZED VIEW w AS SELECT one FROM v"
    Catalog(client, lambda: 1).record_statement("w", {"sql": sql, "seq": 1, "object": "view"})
    record_view(client, compute.ViewDefinition("w", {"v": "v"}, "SELECT one FROM v"), 0)
    client.open_critical_since("w", DEPLOY_READER, "000000000001")  # its generation's
    client.close_shard("w")
    served = engine(client)
    built = Built(served)
    try:
        assert served.start() == []
        assert built.names == ["w"] and set(served.objects) == {"w"}
        assert [e.name for e in read_catalog(client) if e.kind == "statement"] == ["w"]
        assert client.state("w").critical_readers[DEPLOY_READER].opaque == "000000000001"
    finally:
        served.close()


def test_a_restart_finishing_a_drop_records_the_view_as_dropped_in_its_health(
    client: PersistClient,
) -> None:
    """A DROP done in one go records the view's health ``dropped``; one a restart finished
    recorded none, and the health history kept the view's last report (``running``)."""
    from timeshard.status import status_rows
    from timeshard.storage.health import Health, latest_health

    drop_cut_short_after_its_mark(client)
    health = Health(client)
    health.report("w", "running")
    health.close()
    served = engine(client)
    try:
        assert served.start() == []
    finally:
        served.close()
    assert latest_health(client)["w"]["status"] == "dropped"
    row = next(r for r in status_rows(client) if r["object"] == "w")
    assert (row["kind"], row["status"], row["error"]) == ("view", "dropped", None), row
