"""A PostgreSQL export's task against a real server, without Spark: the task is called with
the tick's consolidated changes as the Spark job would give them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.storage.postgres_export import PostgresExport

pytestmark = [pytest.mark.postgres]
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


@pytest.fixture
def export(postgres_dsn: str, tmp_path: Path) -> Any:
    schema = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema)))
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("s", SCHEMA).expire()
    export = PostgresExport(None, client, "s", postgres_dsn, "t", key_columns=["k"], schema=schema)
    yield export
    export.close()


def tick(export: PostgresExport, lower: int, upper: int, rows: list[tuple[Any, ...]]) -> Any:
    """Run the task of ``[lower, upper)`` on ``rows`` (k, v, time, diff[, err])."""
    names = ["k", "v", TS, DIFF, ERR]
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(names, (*r, None)[:5], strict=True)) for r in rows],
        schema=pa.schema([*SCHEMA, (TS, pa.int64()), (DIFF, pa.int64()), (ERR, pa.string())]),
    )
    [out] = [b.to_pylist()[0] for b in export._task(lower, upper)([batch])]
    return out


def table(export: PostgresExport) -> dict[str, int]:
    query = psycopg.sql.SQL("SELECT k, v FROM {}").format(
        psycopg.sql.Identifier(export.schema, export.table)
    )
    with psycopg.connect(export.dsn) as conn:
        return dict(conn.execute(query).fetchall())


def test_a_second_row_of_a_key_in_a_later_tick_is_an_error(export: PostgresExport) -> None:
    """The task saw only the tick's changes: a key's second row in a later tick overwrote
    the first (ON CONFLICT DO UPDATE), and retracting it deleted the row the shard kept."""
    assert tick(export, 0, 1, [("a", 1, 0, 1), ("b", 1, 0, 1)])["status"] == "committed"
    second = tick(export, 1, 2, [("a", 2, 1, 1)])
    assert second["status"] == "error"
    assert "key ('a',)" in second["detail"] and "already has a row" in second["detail"]
    assert table(export) == {"a": 1, "b": 1}
    # An update and a delete of the table's rows go on; a key the table lacks is reported.
    assert (
        tick(export, 1, 2, [("a", 1, 1, -1), ("a", 3, 1, 1), ("b", 1, 1, -1)])["status"]
        == "committed"
    )
    assert table(export) == {"a": 3}
    gone = tick(export, 2, 3, [("b", 1, 2, -1)])
    assert gone["status"] == "error" and "has no row of it" in gone["detail"]


def test_an_error_retracted_within_the_tick_is_passed(export: PostgresExport) -> None:
    """An error at 1 retracted at 2 failed every tick from [1, ...) on: the +1 and the -1
    were two rows (consolidated per time), and the first raised."""
    assert tick(export, 0, 1, [("a", 1, 0, 1)])["status"] == "committed"
    present = tick(export, 1, 2, [(None, None, 1, 1, "bad cast")])
    assert present["status"] == "error"
    assert present["detail"] == (
        "the shard has an error at time 1, which an export cannot write: bad cast"
    )
    retracted = [(None, None, 1, 1, "bad cast"), (None, None, 2, -1, "bad cast"), ("b", 2, 3, 1)]
    assert tick(export, 1, 4, retracted)["status"] == "committed"
    assert table(export) == {"a": 1, "b": 2}


def test_an_export_refuses_a_progress_written_to_another_table(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The progress row was keyed by the export's id alone: an export whose table was changed
    under the same id started the new table at the old one's progress, which never got the
    changes below it."""
    from timeshard.errors import InvalidUsage

    schema = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema)))
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("s", SCHEMA).expire()

    def export(table: str) -> PostgresExport:
        return PostgresExport(
            None,
            client,
            "s",
            postgres_dsn,
            table,
            key_columns=["k"],
            schema=schema,
            export_id="sink",
        )

    old = export("t_old")
    assert old.step().status == "idle"  # registers its hold
    assert tick(old, 0, 1, [("a", 1, 0, 1)])["status"] == "committed"
    old.close()
    moved = export("t_new")
    with pytest.raises(InvalidUsage, match=f"written to table {schema}.t_old, not to table"):
        moved.step()
    # A progress row from before the target was recorded is taken as this export's.
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(
            psycopg.sql.SQL("UPDATE {} SET target = NULL").format(
                psycopg.sql.Identifier(schema, "_timeshard_progress")
            )
        )
    assert moved.step().status == "idle"
    moved.close()


def test_an_export_declared_with_other_key_columns_does_not_go_on(
    export: PostgresExport,
) -> None:
    """The progress row did not say which key columns it was written with: an export of the
    same id declared with others went on from it."""
    from timeshard.errors import InvalidUsage

    assert export.step().status == "idle"  # registers its hold
    assert tick(export, 0, 1, [("a", 1, 0, 1)])["status"] == "committed"
    assert export.progress().declared == "envelope 'upsert', key columns ['k']"  # type: ignore[union-attr]
    with psycopg.connect(export.dsn) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE UNIQUE INDEX ON {} (k, v)").format(
                psycopg.sql.Identifier(export.schema, export.table)
            )
        )
    other = PostgresExport(
        None,
        export.client,
        "s",
        export.dsn,
        export.table,
        key_columns=["k", "v"],
        schema=export.schema,
        export_id=export.export_id,
    )
    with pytest.raises(InvalidUsage) as refused:
        other.step()
    assert "written with envelope 'upsert', key columns ['k'], not with" in str(refused.value)
    assert "key columns ['k', 'v']" in str(refused.value)
    other.close()
    assert export.step().status == "idle"  # declared as before: it goes on


def test_a_table_dropped_while_the_export_was_stopped_is_not_created_again(
    export: PostgresExport,
) -> None:
    """The export created the table again, empty, and went on from its progress: the rows
    below it were lost, silently unless a later change updated or deleted one of them."""
    from timeshard.errors import InvalidUsage

    assert tick(export, 0, 1, [("a", 1, 0, 1)])["status"] == "committed"
    export.close()
    with psycopg.connect(export.dsn) as conn:
        conn.execute(
            psycopg.sql.SQL("DROP TABLE {}").format(
                psycopg.sql.Identifier(export.schema, export.table)
            )
        )

    def again() -> PostgresExport:
        return PostgresExport(
            None,
            export.client,
            "s",
            export.dsn,
            export.table,
            key_columns=["k"],
            schema=export.schema,
            export_id=export.export_id,
        )

    with pytest.raises(InvalidUsage, match=r"does not exist, though .* below 1 to it"):
        again()
    with psycopg.connect(export.dsn) as conn:
        conn.execute(
            psycopg.sql.SQL("DELETE FROM {}").format(
                psycopg.sql.Identifier(export.schema, "_timeshard_progress")
            )
        )
    restarted = again()  # from the start, into a new table
    assert restarted.progress() is None and table(restarted) == {}
    restarted.close()


@pytest.mark.parametrize("nulls", ["", " NULLS NOT DISTINCT"], ids=["distinct", "not-distinct"])
def test_a_key_with_a_null_is_found_in_a_table_keyed_by_a_unique_index(
    postgres_dsn: str, tmp_path: Path, nulls: str
) -> None:
    """A table keyed by a unique index on a nullable column holds a NULL key; the update and
    delete of its row compared ``k = NULL``, which is never true: the export stalled for
    good at the retraction of a row it had inserted ("the table was changed outside the
    export"), and a second NULL-keyed row was inserted beside the first (ON CONFLICT never
    fires on a NULL where NULLs are distinct)."""
    schema = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema)))
        conn.execute(
            psycopg.sql.SQL("CREATE TABLE {} (k text, v bigint, UNIQUE" + nulls + " (k))").format(
                psycopg.sql.Identifier(schema, "t")
            )
        )
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    client.open_writer("s", SCHEMA).expire()
    export = PostgresExport(None, client, "s", postgres_dsn, "t", key_columns=["k"], schema=schema)
    assert tick(export, 0, 1, [(None, 1, 0, 1), ("a", 1, 0, 1)])["status"] == "committed"
    second = tick(export, 1, 2, [(None, 2, 1, 1)])  # a second row of the NULL key
    assert second["status"] == "error" and "already has a row" in second["detail"], second
    assert tick(export, 1, 2, [(None, 1, 1, -1), (None, 5, 1, 1)])["status"] == "committed"
    assert table(export) == {None: 5, "a": 1}
    assert tick(export, 2, 3, [(None, 5, 2, -1)])["status"] == "committed"
    assert table(export) == {"a": 1}
    export.close()


def test_a_table_whose_column_types_differ_is_refused(postgres_dsn: str, tmp_path: Path) -> None:
    """An existing table's column types were not checked: a bigint written into a text
    column was stored as its text, a decimal into a numeric of a smaller scale rounded, and
    a key compared as ``text = bigint`` failed in every task (a fault, retried for ever)."""
    from decimal import Decimal

    from timeshard.errors import InvalidUsage

    schema = f"s_{uuid.uuid4().hex[:10]}"
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    shard = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("d", pa.decimal128(10, 3))])
    client.open_writer("s", shard).expire()
    tables = {
        "vtext": "k bigint PRIMARY KEY, v text, d numeric(10, 3)",
        "ktext": "k text PRIMARY KEY, v bigint, d numeric(10, 3)",
        "scale": "k bigint PRIMARY KEY, v bigint, d numeric(10, 1)",
        "same": "k int8 PRIMARY KEY, v int8, d decimal(10, 3)",
    }
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema)))
        for name, columns in tables.items():
            conn.execute(
                psycopg.sql.SQL("CREATE TABLE {} (" + columns + ")").format(
                    psycopg.sql.Identifier(schema, name)
                )
            )

    def declare(table: str) -> PostgresExport:
        return PostgresExport(
            None, client, "s", postgres_dsn, table, key_columns=["k"], schema=schema
        )

    for name, column, theirs in (
        ("vtext", "v", "text"),
        ("ktext", "k", "text"),
        ("scale", "d", "numeric\\(10,1\\)"),
    ):
        with pytest.raises(InvalidUsage, match=rf"'{column}': \('{theirs}', '"):
            declare(name)
    same = declare("same")  # the same types, spelt otherwise
    names = ["k", "v", "d", TS, DIFF, ERR]
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(names, (1, 2, Decimal("1.234"), 0, 1, None), strict=True))],
        schema=pa.schema([*shard, (TS, pa.int64()), (DIFF, pa.int64()), (ERR, pa.string())]),
    )
    [out] = [b.to_pylist()[0] for b in same._task(0, 1)([batch])]
    assert out["status"] == "committed", out
    same.close()
    assert client.state("s").critical_readers == {}
