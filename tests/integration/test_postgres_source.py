"""The POSTGRES source against a real server: snapshot, changes, restarts, races, errors.

Every test drives a real PostgreSQL (started by the tests, ``wal_level=logical``)
with psycopg and keeps a model: the tables' contents after each round of
committed transactions. After every ingestion step the output shards must
equal the model at every time the step bound -- the remap binds each time to
an LSN, and the model at that time is the state after the rounds committed
before it. Types are checked exactly (numeric, timestamptz, jsonb, arrays,
NULLs, a TOASTed value an update leaves alone).
"""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import SparkSession

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Ingestion
from timeshard.storage.postgres_source import PARTITION, PostgresSource, ReadPlan, stream_rows

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

BIG = "x" * 5000  # stored out of line (TOAST)


class Upstream:
    """One schema of the test server, its tables and a model of their contents."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.schema = f"s_{uuid.uuid4().hex[:10]}"
        self.pub = f"p_{uuid.uuid4().hex[:10]}"
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.sql(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))

    def sql(self, query: Any, params: Any = None) -> Any:
        return self.conn.execute(query, params)

    def name(self, table: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(table))

    def create(self, table: str, columns: str, full: bool = True) -> None:
        self.sql(sql.SQL("CREATE TABLE {} (" + columns + ")").format(self.name(table)))
        if full:
            self.sql(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(self.name(table)))

    def publish(self, *tables: str) -> None:
        self.sql(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                sql.Identifier(self.pub), sql.SQL(", ").join(self.name(t) for t in tables)
            )
        )

    def txn(self, *statements: tuple[str, str, Any]) -> None:
        """One transaction of ``(table, SQL with {t} for the table, params)``."""
        with self.conn.transaction():
            for table, query, params in statements:
                self.sql(sql.SQL(query).format(t=self.name(table)), params)

    def rows(self, table: str, columns: str) -> list[tuple[Any, ...]]:
        query = sql.SQL("SELECT " + columns + " FROM {}").format(self.name(table))
        return sorted(self.sql(query).fetchall(), key=repr)

    def close(self) -> None:
        self.conn.close()


def output_rows(client: PersistClient, shard: str, at: int, columns: list[str]) -> list[Any]:
    reader = client.open_leased_reader(shard)
    try:
        rows = reader.snapshot(at).to_pylist()
    finally:
        reader.expire()
    out = []
    for r in rows:
        assert r["_diff"] > 0, r
        out += [tuple(r[c] for c in columns) if r["_err"] is None else ("ERR", r["_err"])] * r[
            "_diff"
        ]
    return sorted(out, key=repr)


def assert_same(got: list[Any], want: list[Any], at: int) -> None:
    """``got == want``, or an error naming the time and the rows missing and extra."""
    missing = [r for r in want if r not in got]
    extra = [r for r in got if r not in want]
    fields = [
        (i, a, b)
        for m, e in zip(missing, extra, strict=False)
        for i, (a, b) in enumerate(zip(m, e, strict=False))
        if a != b
    ]
    assert got == want, (at, len(missing), len(extra), str(fields)[:600])


@pytest.fixture
def upstream(postgres_server: Any) -> Any:
    u = Upstream(postgres_server.dsn)
    yield u
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE NOT active AND slot_name LIKE 'timeshard_%%'"
        )
    u.close()


def started(spark: SparkSession, upstream: Upstream, tmp_path: Path) -> tuple[Any, str, Ingestion]:
    """A new location, and an ingestion of the upstream's publication into it: (client,
    source name, ingestion)."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    name = f"pg_{uuid.uuid4().hex[:8]}"
    source = PostgresSource(name, upstream.dsn, upstream.pub)
    return client, name, Ingestion(spark, client, source, clock=lambda: next(clock))


ORDER_COLUMNS = ["id", "amount", "note", "tags", "at", "doc", "big"]


def test_snapshot_then_changes_at_every_time_with_restarts_and_two_instances(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.create(
        "orders",
        "id int PRIMARY KEY, amount numeric(10,2), note text, tags text[], "
        "at timestamptz, doc jsonb, big text",
    )
    upstream.create("users", "id bigint, name varchar(20)")
    upstream.publish("orders", "users")
    t0 = dt.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)
    insert = "INSERT INTO {t} VALUES (%s, %s, %s, %s, %s, %s, %s)"
    upstream.txn(
        ("orders", insert, (1, Decimal("10.50"), "a", ["x", None, 'q"uote'], t0, '{"k": 1}', BIG)),
        ("orders", insert, (2, None, None, None, None, None, None)),
        ("users", "INSERT INTO {t} VALUES (%s, %s)", (7, "ann")),
        ("users", "INSERT INTO {t} VALUES (%s, %s)", (7, "ann")),  # a duplicate row
    )
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    name = f"pg_{uuid.uuid4().hex[:8]}"

    def ingestion() -> Ingestion:
        source = PostgresSource(name, upstream.dsn, upstream.pub)
        assert sorted(source.outputs()) == [f"{upstream.schema}.orders", f"{upstream.schema}.users"]
        return Ingestion(spark, client, source, clock=lambda: next(clock), retain_history_ms=10**12)

    orders, users = f"{name}.{upstream.schema}.orders", f"{name}.{upstream.schema}.users"
    history: list[tuple[int, list[Any], list[Any]]] = []  # (time, orders, users)

    def step(ing: Ingestion) -> None:
        ing.step()
        upper = client.state(orders).upper.time
        assert upper is not None and client.state(users).upper.time == upper
        want_orders = upstream.rows("orders", "id, amount, note, tags, at, doc::text, big")
        want_users = upstream.rows("users", "id, name")
        history.append((upper - 1, want_orders, want_users))
        for at, o, u in history:  # every time bound so far still reads right
            assert_same(output_rows(client, orders, at, ORDER_COLUMNS), o, at)
            assert_same(output_rows(client, users, at, ["id", "name"]), u, at)

    first = ingestion()
    step(first)  # the snapshot
    assert len(history[-1][1]) == 2 and history[-1][2] == [(7, "ann"), (7, "ann")]
    upstream.txn(
        ("orders", "UPDATE {t} SET amount = %s WHERE id = 1", (Decimal("11.25"),)),  # big: TOAST
        ("orders", "DELETE FROM {t} WHERE id = %s", (2,)),
        ("orders", insert, (3, Decimal("-0.01"), "c", [], t0, "[1, 2]", None)),
    )
    upstream.txn(("users", "DELETE FROM {t} WHERE id = %s", (7,)))
    step(first)
    second = ingestion()  # a second instance, racing the first
    upstream.txn(("users", "INSERT INTO {t} VALUES (%s, %s)", (8, None)))
    step(second)
    upstream.txn(("orders", "UPDATE {t} SET note = %s, big = %s WHERE id = 3", ("d", BIG + "y")))
    step(first)
    first.close()
    step(second)  # nothing new: an idle step
    second.close()
    restarted = ingestion()  # resumes from its frontier: no second snapshot
    upstream.txn(("orders", insert, (4, Decimal("99999999.99"), "e", ["z"], t0, "{}", "")))
    step(restarted)
    restarted.close()
    with psycopg.connect(upstream.dsn) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn > '0/0' FROM pg_replication_slots WHERE slot_name = %s",
            (restarted.source.slot,),  # type: ignore[attr-defined]
        ).fetchone()
    assert row == (True,)
    restarted.source.drop()  # type: ignore[attr-defined]
    with psycopg.connect(upstream.dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
            (restarted.source.slot,),  # type: ignore[attr-defined]
        ).fetchone() == (0,)


def test_replica_identity_must_be_full(upstream: Upstream) -> None:
    upstream.create("t", "id int PRIMARY KEY", full=False)
    upstream.publish("t")
    with pytest.raises(InvalidUsage, match=r"REPLICA IDENTITY FULL"):
        PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, upstream.pub)
    with pytest.raises(InvalidUsage, match="no publication 'nope'"):
        PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, "nope")


def test_a_schema_change_errors_one_subsource_and_bad_values_are_err_rows(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.create("a", "id int, v text")
    upstream.create("b", "id int, at timestamp")
    upstream.publish("a", "b")
    upstream.txn(("a", "INSERT INTO {t} VALUES (1, 'one')", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()
    upstream.txn(
        ("b", "INSERT INTO {t} VALUES (1, 'infinity')", None),  # no Arrow timestamp holds it
        ("b", "INSERT INTO {t} VALUES (2, '2020-01-01 00:00:00')", None),
    )
    upstream.sql(sql.SQL("ALTER TABLE {} DROP COLUMN v").format(upstream.name("a")))
    upstream.txn(
        ("a", "INSERT INTO {t} VALUES (2)", None),
        ("b", "INSERT INTO {t} VALUES (3, NULL)", None),
    )
    ing.step()
    upper = client.state(f"{name}.{upstream.schema}.a").upper.time
    assert upper is not None
    a_rows = output_rows(client, f"{name}.{upstream.schema}.a", upper - 1, ["id", "v"])
    assert (1, "one") in a_rows and len(a_rows) == 2, a_rows
    [a_err] = [r for r in a_rows if r[0] == "ERR"]
    assert "upstream schema changed: column 'v' was dropped at LSN" in a_err[1], a_rows
    b_rows = output_rows(client, f"{name}.{upstream.schema}.b", upper - 1, ["id", "at"])
    assert (2, dt.datetime(2020, 1, 1)) in b_rows and (3, None) in b_rows
    errs = [r for r in b_rows if r[0] == "ERR"]
    assert len(errs) == 1 and "infinity" in errs[0][1], b_rows
    ing.close()


def test_a_replica_identity_no_longer_full_is_an_err_row_not_a_stale_row(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """An update then comes without its old row: applied, it would leave the old row."""
    upstream.create("t", "id int PRIMARY KEY, v text")
    upstream.publish("t")
    upstream.txn(("t", "INSERT INTO {t} VALUES (1, 'a')", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()
    upstream.sql(sql.SQL("ALTER TABLE {} REPLICA IDENTITY DEFAULT").format(upstream.name("t")))
    upstream.txn(("t", "UPDATE {t} SET v = 'b' WHERE id = 1", None))
    ing.step()
    shard = f"{name}.{upstream.schema}.t"
    upper = client.state(shard).upper.time
    assert upper is not None
    rows = output_rows(client, shard, upper - 1, ["id", "v"])
    assert (1, "b") not in rows and len(rows) == 2, rows
    [err] = [r for r in rows if r[0] == "ERR"]
    assert "REPLICA IDENTITY is no longer FULL" in err[1], rows
    ing.close()


def test_a_table_renamed_upstream_is_still_read_and_one_created_again_is_an_err_row(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """The stream names a table by its OID. Matched by name, a renamed table's changes were
    dropped with no error, and a table created again under the name was read as the old."""
    upstream.create("t", "id int PRIMARY KEY, v text")
    upstream.create("u", "id int PRIMARY KEY")
    upstream.sql(
        sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
            sql.Identifier(upstream.pub), sql.Identifier(upstream.schema)
        )
    )
    upstream.txn(("t", "INSERT INTO {t} VALUES (1, 'a')", None))
    upstream.txn(("u", "INSERT INTO {t} VALUES (1)", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()
    upstream.sql(sql.SQL("ALTER TABLE {} RENAME TO t_renamed").format(upstream.name("t")))
    upstream.txn(("t_renamed", "UPDATE {t} SET v = 'b' WHERE id = 1", None))
    upstream.txn(("t_renamed", "INSERT INTO {t} VALUES (2, 'c')", None))
    upstream.sql(sql.SQL("DROP TABLE {}").format(upstream.name("u")))
    upstream.create("u", "id int PRIMARY KEY")
    upstream.txn(("u", "INSERT INTO {t} VALUES (5)", None))
    ing.step()
    shard = f"{name}.{upstream.schema}.t"
    upper = client.state(shard).upper.time
    assert upper is not None
    assert output_rows(client, shard, upper - 1, ["id", "v"]) == [(1, "b"), (2, "c")]
    shard = f"{name}.{upstream.schema}.u"
    rows = output_rows(client, shard, upper - 1, ["id"])
    assert (5,) not in rows, rows
    [err] = [r[1] for r in rows if r[0] == "ERR"]
    assert err.startswith(f"{upstream.schema}.u: upstream table was dropped and created again"), err
    ing.close()


@pytest.mark.parametrize("after_snapshot", [True, False])
def test_a_table_created_again_while_no_process_ran_is_an_err_row_not_the_old_table(
    spark: SparkSession, upstream: Upstream, tmp_path: Path, after_snapshot: bool
) -> None:
    """The OIDs were taken from upstream at every build: a table dropped and created again
    under its name between two runs was read, by the next run, as the table it replaced
    (its snapshot too, when the first run had not taken it). The catalog keeps them."""
    upstream.create("u", "id int PRIMARY KEY")
    upstream.sql(
        sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
            sql.Identifier(upstream.pub), sql.Identifier(upstream.schema)
        )
    )
    upstream.txn(("u", "INSERT INTO {t} VALUES (1)", None))
    client, name, ing = started(spark, upstream, tmp_path)
    if after_snapshot:
        ing.step()
    ing.close()
    upstream.sql(sql.SQL("DROP TABLE {}").format(upstream.name("u")))
    upstream.create("u", "id int PRIMARY KEY")
    upstream.txn(("u", "INSERT INTO {t} VALUES (5)", None))
    clock = itertools.count(100)
    again = Ingestion(
        spark, client, PostgresSource(name, upstream.dsn, upstream.pub), clock=lambda: next(clock)
    )
    again.step()
    shard = f"{name}.{upstream.schema}.u"
    upper = client.state(shard).upper.time
    assert upper is not None
    rows = output_rows(client, shard, upper - 1, ["id"])
    assert (5,) not in rows, rows
    assert [r for r in rows if r[0] != "ERR"] == ([(1,)] if after_snapshot else []), rows
    errors = [r[1] for r in rows if r[0] == "ERR"]
    assert errors and all(
        e.startswith(f"{upstream.schema}.u: upstream table was dropped") for e in errors
    ), errors
    again.close()


def test_a_source_restarts_after_a_column_was_added_upstream(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """The next build took each table's columns from upstream: after an ADD COLUMN (which
    the stream tolerates) its writer was opened with the new columns and refused the
    output shard's schema, at every restart, for good. The catalog keeps the columns."""
    upstream.create("t", "id int, v text")
    upstream.publish("t")
    upstream.txn(("t", "INSERT INTO {t} VALUES (1, 'a')", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()
    upstream.sql(sql.SQL("ALTER TABLE {} ADD COLUMN w int").format(upstream.name("t")))
    upstream.txn(("t", "INSERT INTO {t} VALUES (2, 'b', 5)", None))
    ing.step()
    ing.close()
    clock = itertools.count(100)
    again = Ingestion(
        spark, client, PostgresSource(name, upstream.dsn, upstream.pub), clock=lambda: next(clock)
    )
    upstream.txn(("t", "INSERT INTO {t} VALUES (3, 'c', 6)", None))
    again.step()
    shard = f"{name}.{upstream.schema}.t"
    upper = client.state(shard).upper.time
    assert upper is not None
    assert sorted(output_rows(client, shard, upper - 1, ["id", "v"])) == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
    ]
    again.close()


def test_generated_columns_and_column_lists_are_read_as_published_and_row_filters_refused(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """pgoutput sends neither generated columns nor those a column list leaves out: reading
    them in the snapshot made every later change an err row ("column was dropped"). A row
    filter would leave in the snapshot rows whose changes the stream never sends."""
    upstream.create("g", "id int PRIMARY KEY, v int, twice int GENERATED ALWAYS AS (v * 2) STORED")
    upstream.create("c", "id int PRIMARY KEY, v text, secret text")
    upstream.sql(
        sql.SQL("CREATE PUBLICATION {} FOR TABLE {}, {} (id, v)").format(
            sql.Identifier(upstream.pub), upstream.name("g"), upstream.name("c")
        )
    )
    upstream.txn(("g", "INSERT INTO {t} (id, v) VALUES (1, 10)", None))
    upstream.txn(("c", "INSERT INTO {t} VALUES (1, 'a', 'x')", None))
    client, name, ing = started(spark, upstream, tmp_path)
    tables = ing.source.tables  # type: ignore[attr-defined]
    assert [[c.name for c in t.columns] for t in tables] == [["id", "v"], ["id", "v"]]
    ing.step()
    upstream.txn(("g", "UPDATE {t} SET v = 20 WHERE id = 1", None))
    upstream.txn(("c", "INSERT INTO {t} VALUES (2, 'b', 'y')", None))
    ing.step()
    for table, want in (("g", [(1, 20)]), ("c", [(1, "a"), (2, "b")])):
        shard = f"{name}.{upstream.schema}.{table}"
        upper = client.state(shard).upper.time
        assert upper is not None
        assert output_rows(client, shard, upper - 1, ["id", "v"]) == want
    ing.close()
    filtered = f"{upstream.pub}_f"
    upstream.sql(
        sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WHERE (id > 10)").format(
            sql.Identifier(filtered), upstream.name("g")
        )
    )
    with pytest.raises(InvalidUsage, match=r"filters the rows of .*\(id > 10\)"):
        PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, filtered)


def test_a_dropped_slot_is_a_definite_error(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.create("t", "id int")
    upstream.publish("t")
    upstream.txn(("t", "INSERT INTO {t} VALUES (1)", None))
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    source = PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, upstream.pub)
    ing = Ingestion(spark, client, source, clock=lambda: next(clock))
    ing.step()
    source.drop()
    upstream.txn(("t", "INSERT INTO {t} VALUES (2)", None))
    with pytest.raises(SourceUnavailable, match="is gone") as e:
        ing.step()
    assert e.value.definite
    ing.close()


def test_a_declared_postgres_source_feeds_a_view(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    from timeshard.controller import Pipeline
    from timeshard.spec import check_spec, load_spec

    upstream.create("items", "id int, price numeric(8,2)")
    upstream.publish("items")
    upstream.txn(("items", "INSERT INTO {t} VALUES (1, 2.50), (2, 4.00)", None))
    name = f"pg_{uuid.uuid4().hex[:8]}"
    items = f"{name}.{upstream.schema}.items"
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        f"""
[location]
dir = "{tmp_path / "loc"}"

[[source]]
name = "{name}"
kind = "postgres"
options = {{ dsn = "{upstream.dsn}", publication = "{upstream.pub}" }}

[[view]]
name = "total"
inputs = {{ items = "{items}" }}
sql = "SELECT count(*) AS n, sum(price) AS s FROM items"
"""
    )
    spec = load_spec(spec_file)
    check_spec(spec, existing=[])
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    pipeline = Pipeline(spark, client, spec, view_tick_s=0.0)
    upstream.txn(("items", "UPDATE {t} SET price = 10 WHERE id = 2", None))
    for _ in range(2):
        assert pipeline.step() == {}
    pipeline.views[0].catch_up(timeout_s=300)  # the sink writes in the background
    upper = client.state("total").upper.time
    assert upper is not None and upper > 0
    assert output_rows(client, "total", upper - 1, ["n", "s"]) == [(2, Decimal("12.50"))]
    pipeline.close()
    bad = spec_file.read_text().replace(
        'kind = "postgres"', 'kind = "postgres"\ncolumns = { a = "int64" }'
    )
    spec_file.write_text(bad)
    with pytest.raises(InvalidUsage, match="declare no columns"):
        check_spec(load_spec(spec_file), existing=[])


def test_changes_between_the_slot_and_the_snapshot_are_rewound(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """The snapshot is taken at the first read, after these commits: it counts them once."""
    upstream.create("t", "id int, v text")
    upstream.publish("t")
    upstream.txn(("t", "INSERT INTO {t} VALUES (1, 'a'), (2, 'b')", None))
    name = f"pg_{uuid.uuid4().hex[:8]}"
    source = PostgresSource(name, upstream.dsn, upstream.pub)  # the slot: C is here
    upstream.txn(("t", "INSERT INTO {t} VALUES (3, 'c')", None))
    upstream.txn(
        ("t", "UPDATE {t} SET v = 'B' WHERE id = 2", None),
        ("t", "DELETE FROM {t} WHERE id = 1", None),
    )
    upstream.txn(("t", "INSERT INTO {t} VALUES (3, 'c')", None))  # a duplicate row
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    ing = Ingestion(spark, client, source, clock=lambda: next(clock))
    ing.step()
    shard = f"{name}.{upstream.schema}.t"
    upper = client.state(shard).upper.time
    assert upper is not None
    want = upstream.rows("t", "id, v")
    assert want == [(2, "B"), (3, "c"), (3, "c")]
    assert_same(output_rows(client, shard, upper - 1, ["id", "v"]), want, upper - 1)
    ing.close()


def test_a_read_never_moves_the_slot(upstream: Upstream) -> None:
    """Only ``commit`` advances the slot. A read that sees no change of its tables before a
    keepalive must not confirm the WAL end the keepalive names (psycopg2 forwards its flush
    position to it), or the next step finds the slot past its resumption frontier."""
    upstream.create("t", "id int")
    upstream.create("other", "id int")
    upstream.publish("t")
    source = PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, upstream.pub)
    start = source.confirmed_flush()
    assert start is not None

    def read(hi: int) -> list[Any]:
        plan = ReadPlan(
            upstream.dsn,
            source.slot,
            upstream.pub,
            source.tables,
            lo=start,
            hi=hi,
            consistent=start,
            snapshot=None,
        )
        return [row[4] for row in stream_rows(plan)]

    # WAL with no change of t in it, then a target past the WAL's end: the read waits,
    # with keepalives and feedback, until its nudge writes a record past the target.
    upstream.txn(("other", "INSERT INTO {t} VALUES (1)", None))
    assert read(source.upper()[PARTITION] + 1) == []
    assert source.confirmed_flush() == start
    upstream.txn(("t", "INSERT INTO {t} VALUES (7)", None))
    upstream.txn(("other", "INSERT INTO {t} VALUES (2)", None))
    assert read(source.upper()[PARTITION] + 1) == [["7"]]
    assert source.confirmed_flush() == start
    source.drop()


def read_stream(source: PostgresSource, upstream: Upstream) -> list[tuple[int, str | None, Any]]:
    """The slot's changes from its position to the server's upper: (diff, error, values)."""
    start = source.confirmed_flush()
    assert start is not None
    plan = ReadPlan(
        upstream.dsn,
        source.slot,
        source.publication,
        source.tables,
        lo=start,
        hi=source.upper()[PARTITION] + 1,
        consistent=start,
        snapshot=None,
        encoding=source.encoding,
    )
    return [(row[2], row[3], row[4]) for row in stream_rows(plan)]


def test_a_partitioned_table_via_its_root_needs_every_partition_full(upstream: Upstream) -> None:
    """Published via its root, a partitioned table's changes log the old row as each
    partition's own identity has it: the constructor names the partitions that are not FULL,
    and a partition attached later that is not makes its updates and deletes err rows."""
    s = upstream.schema
    upstream.sql(f"CREATE TABLE {s}.p (id int, v text) PARTITION BY RANGE (id)")
    upstream.sql(
        f"CREATE TABLE {s}.p1 PARTITION OF {s}.p (PRIMARY KEY (id)) FOR VALUES FROM (0) TO (100)"
    )
    upstream.sql(f"ALTER TABLE {s}.p REPLICA IDENTITY FULL")
    upstream.sql(
        f"CREATE PUBLICATION {upstream.pub} FOR TABLE {s}.p "
        "WITH (publish_via_partition_root = true)"
    )
    with pytest.raises(InvalidUsage, match=rf"partitions \['{s}.p1'\] of table {s}.p need"):
        PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, upstream.pub)
    upstream.sql(f"ALTER TABLE {s}.p1 REPLICA IDENTITY FULL")
    source = PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, upstream.pub)
    try:
        upstream.txn(("p", "INSERT INTO {t} VALUES (1, 'a'), (2, 'b')", None))
        upstream.txn(("p", "UPDATE {t} SET v = 'z' WHERE id = 1", None))
        upstream.txn(("p", "DELETE FROM {t} WHERE id = 2", None))
        assert read_stream(source, upstream) == [
            (1, None, ["1", "a"]),
            (1, None, ["2", "b"]),
            (-1, None, ["1", "a"]),
            (1, None, ["1", "z"]),
            (-1, None, ["2", "b"]),
        ]
        source.commit(source.upper())
        # Attached later with its primary key as identity: an update logs no old row, a
        # delete the key only (in an 'O' tuple, the root's, with the other columns NULL).
        upstream.sql(
            f"CREATE TABLE {s}.p2 PARTITION OF {s}.p (PRIMARY KEY (id)) "
            "FOR VALUES FROM (100) TO (200)"
        )
        upstream.txn(("p", "INSERT INTO {t} VALUES (101, 'b')", None))
        upstream.txn(("p", "UPDATE {t} SET v = 'y' WHERE id = 101", None))
        upstream.txn(("p", "DELETE FROM {t} WHERE id = 101", None))
        rows = read_stream(source, upstream)
    finally:
        source.drop()
    assert len(rows) == 3 and all(diff == 1 and values is None for diff, _, values in rows)
    why = f"{s}.p: upstream schema changed: the partitions ['{s}.p2'] have no REPLICA"
    assert all(e.startswith(why) for _, e, _ in rows), rows


def test_a_publication_that_leaves_out_updates_deletes_or_truncates_is_refused(
    upstream: Upstream,
) -> None:
    upstream.create("t", "id int, v text")
    upstream.sql(
        sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (publish = 'insert, delete')").format(
            sql.Identifier(upstream.pub), upstream.name("t")
        )
    )
    with pytest.raises(InvalidUsage, match=rf"{upstream.pub}' does not publish update, truncate"):
        PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, upstream.pub)
    upstream.sql(
        sql.SQL("ALTER PUBLICATION {} SET (publish = 'insert, update, delete, truncate')").format(
            sql.Identifier(upstream.pub)
        )
    )
    PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, upstream.pub).drop()


@pytest.mark.parametrize("shape", ["Pub_{}", "pub {}, x", 'pub"{}'])
def test_a_publication_name_is_read_as_written_not_folded_or_split(
    upstream: Upstream, shape: str
) -> None:
    """pgoutput parses ``publication_names`` as a list of SQL identifiers: unquoted, 'Pub_x'
    would read the lowercase 'pub_x' (another publication here) and 'a, b' two of them."""
    upstream.create("t", "id int")
    upstream.create("other", "id int")
    pub = shape.format(uuid.uuid4().hex[:6])
    for name, table in [(pub, "t"), (pub.lower().split(",")[0].split('"')[0], "other")]:
        upstream.sql(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                sql.Identifier(name), upstream.name(table)
            )
        )
    source = PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, pub)
    upstream.txn(
        ("t", "INSERT INTO {t} VALUES (1)", None), ("other", "INSERT INTO {t} VALUES (2)", None)
    )
    try:
        assert read_stream(source, upstream) == [(1, None, ["1"])]
    finally:
        source.drop()


def test_source_names_never_share_a_slot_and_an_old_default_slot_is_kept(
    upstream: Upstream,
) -> None:
    """'a.x' and 'a-x' had one slot (one source's commit moved the other's past its frontier,
    one's drop dropped the other's). A source whose slot was defaulted before (the name with
    '_' for other characters) and so exists keeps it; the catalog's recorded slot wins."""
    upstream.create("t", "id int")
    upstream.publish("t")
    base = f"pg_{uuid.uuid4().hex[:8]}"
    a = PostgresSource(base + ".x", upstream.dsn, upstream.pub)
    b = PostgresSource(base + "-x", upstream.dsn, upstream.pub)
    assert a.slot != b.slot
    b_start = b.confirmed_flush()
    upstream.txn(("t", "INSERT INTO {t} VALUES (1)", None))
    a.commit(a.upper())
    assert b.confirmed_flush() == b_start
    a.drop()
    assert b.confirmed_flush() == b_start
    b.drop()

    old = "timeshard_" + base.lower() + "_y"  # the slot an earlier build made for base.y
    with psycopg.connect(upstream.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (old,))

        def slot_names() -> set[str]:
            query = "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE %s"
            return {r[0] for r in conn.execute(query, (f"timeshard_{base}%",)).fetchall()}

        again = PostgresSource(base + ".y", upstream.dsn, upstream.pub)
        assert again.slot == old and slot_names() == {old}
        # Built with no slot of either name, it makes the new one, and drops it again when
        # its catalog entry records the old one (which a read then finds gone, or not).
        conn.execute("SELECT pg_drop_replication_slot(%s)", (old,))
        fresh = PostgresSource(base + ".y", upstream.dsn, upstream.pub)
        assert fresh.slot != old and slot_names() == {fresh.slot}
        fresh.pin_recorded({"slot": old})
        assert fresh.slot == old and slot_names() == set()
        declared = PostgresSource(base + ".y", upstream.dsn, upstream.pub, slot="mine_" + base)
        declared.pin_recorded({"slot": old})
        assert declared.slot == "mine_" + base
        declared.drop()


def test_a_database_not_in_utf8_is_read_in_its_encoding(upstream: Upstream) -> None:
    """pgoutput sends names and values in the database's encoding, not the client's: read
    as UTF-8, a LATIN1 'é' failed the read task on every retry."""
    database = f"l1_{uuid.uuid4().hex[:8]}"
    upstream.sql(
        f"CREATE DATABASE {database} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
        "TEMPLATE template0"
    )
    latin1 = Upstream(upstream.dsn.rsplit("/", 1)[0] + "/" + database)
    try:
        latin1.create("café", "id int, v text")
        latin1.publish("café")
        source = PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", latin1.dsn, latin1.pub)
        assert source.encoding == "iso8859-1"
        assert [t.name for t in source.tables] == ["café"]
        latin1.txn(("café", "INSERT INTO {t} VALUES (1, 'crème brûlée')", None))
        try:
            assert read_stream(source, latin1) == [(1, None, ["1", "crème brûlée"])]
        finally:
            source.drop()
        ascii_db = f"a_{uuid.uuid4().hex[:8]}"
        upstream.sql(f"CREATE DATABASE {ascii_db} ENCODING 'SQL_ASCII' TEMPLATE template0")
        undeclared = Upstream(upstream.dsn.rsplit("/", 1)[0] + "/" + ascii_db)
        undeclared.create("t", "id int")
        undeclared.publish("t")
        with pytest.raises(InvalidUsage, match="encoding SQL_ASCII cannot be read"):
            PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", undeclared.dsn, undeclared.pub)
        undeclared.close()
    finally:
        latin1.close()


def test_a_column_dropped_and_added_again_under_its_name_is_an_err_row(upstream: Upstream) -> None:
    """Same name and type, but the old values are gone: read on, the shard would keep them
    and the next update would retract a row the shard never had."""
    upstream.create("t", "id int, v text")
    upstream.publish("t")
    source = PostgresSource(f"pg_{uuid.uuid4().hex[:8]}", upstream.dsn, upstream.pub)
    try:
        upstream.txn(("t", "INSERT INTO {t} VALUES (1, 'a')", None))
        assert read_stream(source, upstream) == [(1, None, ["1", "a"])]
        source.commit(source.upper())
        upstream.sql(
            sql.SQL("ALTER TABLE {} DROP COLUMN v, ADD COLUMN v text").format(upstream.name("t"))
        )
        upstream.txn(("t", "UPDATE {t} SET v = 'b' WHERE id = 1", None))
        ((diff, error, values),) = read_stream(source, upstream)
    finally:
        source.drop()
    assert diff == 1 and values is None, (diff, values)
    assert error is not None and error.startswith(
        f"{upstream.schema}.t: upstream schema changed: column 'v' was dropped and added again"
    ), error


def test_a_table_that_leaves_the_publication_is_an_err_row_not_a_stale_shard(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """Its changes are no longer sent: its shard's upper went on advancing over rows that
    were no longer true. One err row (written once), and its later changes are errors."""
    upstream.create("t", "id int, v text")
    upstream.create("u", "id int")
    upstream.publish("t", "u")
    upstream.txn(("t", "INSERT INTO {t} VALUES (1, 'a')", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()
    upstream.sql(
        sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(
            sql.Identifier(upstream.pub), upstream.name("t")
        )
    )
    upstream.txn(
        ("t", "UPDATE {t} SET v = 'b' WHERE id = 1", None),
        ("u", "INSERT INTO {t} VALUES (1)", None),
    )
    ing.step()
    upstream.sql(
        sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
            sql.Identifier(upstream.pub), upstream.name("t")
        )
    )
    upstream.txn(("t", "UPDATE {t} SET v = 'c' WHERE id = 1", None))
    ing.step()
    ing.step()
    t, u = f"{name}.{upstream.schema}.t", f"{name}.{upstream.schema}.u"
    upper = client.state(t).upper.time
    assert upper is not None
    rows = output_rows(client, t, upper - 1, ["id", "v"])
    ing.close()
    why = f"{upstream.schema}.t: left the publication '{upstream.pub}'"
    errors = sorted(r[1] for r in rows if r[0] == "ERR")
    assert len(rows) == 3 and (1, "a") in rows and len(errors) == 2, rows
    found, later = why + " (its changes are no longer sent): found at", why + " (its changes are"
    assert any(e.startswith(found) for e in errors), errors  # written once
    assert any(e.startswith(later) and not e.startswith(found) for e in errors), errors
    assert output_rows(client, u, upper - 1, ["id"]) == [(1,)]


def test_the_recorded_columns_win_over_upstream_on_a_later_build(upstream: Upstream) -> None:
    """After a tolerated ADD COLUMN upstream, a build that took the columns from upstream
    had another output schema than the shard's (the restart failed); and a column dropped
    and added again while no process ran was read as the same one."""
    upstream.create("t", "id int, v text")
    upstream.publish("t")
    name = f"pg_{uuid.uuid4().hex[:8]}"
    first = PostgresSource(name, upstream.dsn, upstream.pub)
    recorded = {"table_columns": first.recorded_columns()}
    assert recorded["table_columns"] == {
        f"{upstream.schema}.t": [["id", 23, -1, 1], ["v", 25, -1, 2]]
    }
    upstream.sql(sql.SQL("ALTER TABLE {} ADD COLUMN w int").format(upstream.name("t")))
    again = PostgresSource(name, upstream.dsn, upstream.pub)
    assert again.outputs() != first.outputs()
    again.pin_recorded(recorded)
    assert again.outputs() == first.outputs()
    upstream.sql(
        sql.SQL("ALTER TABLE {} DROP COLUMN v, ADD COLUMN v text").format(upstream.name("t"))
    )
    upstream.txn(("t", "INSERT INTO {t} VALUES (1, 5, 'a')", None))
    third = PostgresSource(name, upstream.dsn, upstream.pub)
    third.pin_recorded(recorded)
    try:
        ((_, error, _),) = read_stream(third, upstream)
    finally:
        third.drop()
    assert error is not None and "column 'v' was dropped and added again" in error, error
    with pytest.raises(InvalidUsage, match=r"recorded columns of .* are not"):
        third.pin_recorded({"table_columns": {f"{upstream.schema}.t": [["id", "23", -1, 1]]}})


def test_a_table_rewritten_by_an_alter_type_using_is_an_err_row_not_stale_rows(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """``ALTER COLUMN ... TYPE <same type> USING expr`` rewrites every row and sends no change
    (its Relation message, if any, is the same as before): read on, the shard kept the old
    values. A VACUUM FULL (a rewrite of the same values) or a SET NOT NULL alone is none,
    nor is the VACUUM FULL of a table with a column added with a default (the rewrite
    clears its missing value, writing its catalog row: that was taken for the ALTER)."""
    upstream.create("t", "id int, v int")
    upstream.create("u", "id int")
    upstream.txn(("t", "INSERT INTO {t} VALUES (1, 1)", None))
    upstream.sql(sql.SQL("ALTER TABLE {} ADD COLUMN c int DEFAULT 7").format(upstream.name("t")))
    upstream.publish("t", "u")
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()
    t, u = f"{name}.{upstream.schema}.t", f"{name}.{upstream.schema}.u"
    upstream.sql(sql.SQL("ALTER TABLE {} ALTER COLUMN v SET NOT NULL").format(upstream.name("t")))
    ing.step()
    upstream.sql(sql.SQL("VACUUM FULL {}").format(upstream.name("t")))
    ing.step()
    upper = client.state(t).upper.time
    assert upper is not None
    assert output_rows(client, t, upper - 1, ["id", "v"]) == [(1, 1)]
    upstream.sql(
        sql.SQL("ALTER TABLE {} ALTER COLUMN v TYPE int USING v + 10").format(upstream.name("t"))
    )
    upstream.txn(("u", "INSERT INTO {t} VALUES (1)", None))
    ing.step()
    ing.step()
    upper = client.state(t).upper.time
    assert upper is not None
    rows = output_rows(client, t, upper - 1, ["id", "v"])
    assert output_rows(client, u, upper - 1, ["id"]) == [(1,)]
    ing.close()
    errors = [r[1] for r in rows if r[0] == "ERR"]
    assert len(errors) == 1 and errors[0].startswith(f"{upstream.schema}.t: rewritten upstream"), (
        rows
    )
