"""DROP closes the dropped object's shards: its name is unknown to reads from then on, no
writer appends to it again, and a CREATE of the name is refused.

Without this, a dropped view stayed readable under its name, and a view created again
under it resumed from the old shard: right after CREATE (and AS OF its recorded start)
it read the old query's rows, and a FILE source created again resumed from the old
byte offsets. No Spark: the engine's view builder is stubbed, as in
``test_catalog_claims.py``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from tests.unit.test_catalog_claims import Built, engine, run

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
