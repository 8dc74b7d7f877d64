"""The MYSQL source against a real MariaDB: snapshot, changes, domains, restarts, races, errors.

Every test drives a real MariaDB (started by the tests: ROW binlog, GTIDs,
strict mode) with pymysql and keeps a model: the tables' contents after each
round of committed transactions, read back from the server. After every
ingestion step the output shards must equal the model at every time the
step bound -- the remap binds each time to a GTID frontier, and the model at
that time is the state after the rounds committed before it. Types are
checked exactly (unsigned bigint, decimal, float, timestamp in UTC, JSON,
enum, set, blobs, NULLs).
"""

from __future__ import annotations

import datetime as dt
import itertools
import time
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pymysql
import pytest
from pyspark.sql import SparkSession

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.health import STATUS_SHARD
from timeshard.storage.ingest import Ingestion
from timeshard.storage.mysql_source import (
    SNAPSHOT_PARTITION,
    MySqlSource,
    ReadPlan,
    binlog_end,
    quote,
    start_position,
    stream_rows,
)

pytestmark = [pytest.mark.spark, pytest.mark.mysql]


class Upstream:
    """One database of the test server, its tables, and reads of their contents."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.database = f"d_{uuid.uuid4().hex[:10]}"
        self.conn = self.connect()
        self.sql(f"CREATE DATABASE {quote(self.database)}")
        self.sql(f"USE {quote(self.database)}")
        self.url = server.url.rsplit("/", 1)[0] + "/" + self.database

    def connect(self) -> Any:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.server.port,
            user=self.server.user,
            password=self.server.password,
            autocommit=True,
            init_command="SET time_zone = '+00:00'",
        )

    def sql(self, query: str, params: Any = None) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall()

    def txn(self, *statements: tuple[str, Any], domain: int = 0) -> None:
        """One transaction (``{t}`` in a statement is replaced by nothing: name tables)."""
        self.sql("SET SESSION gtid_domain_id = %s", (domain,))
        self.sql("BEGIN")
        for query, params in statements:
            self.sql(query, params)
        self.sql("COMMIT")
        self.sql("SET SESSION gtid_domain_id = 0")

    def rows(self, table: str, columns: str) -> list[tuple[Any, ...]]:
        return sorted(self.sql(f"SELECT {columns} FROM {quote(table)}"), key=repr)

    def close(self) -> None:
        self.sql(f"DROP DATABASE {quote(self.database)}")
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
        row = tuple(r[c] for c in columns) if r["_err"] is None else ("ERR", r["_err"])
        out += [row] * r["_diff"]
    return sorted(out, key=repr)


def assert_same(got: list[Any], want: list[Any], at: int) -> None:
    missing = [r for r in want if r not in got]
    extra = [r for r in got if r not in want]
    assert got == want, (at, missing[:5], extra[:5])


@pytest.fixture
def upstream(mariadb_server: Any) -> Any:
    u = Upstream(mariadb_server)
    yield u
    u.close()


def started(spark: SparkSession, upstream: Upstream, tmp_path: Path) -> tuple[Any, str, Ingestion]:
    """A new location, and an ingestion of the upstream database into it: (client, source
    name, ingestion)."""
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    name = f"my_{uuid.uuid4().hex[:8]}"
    source = MySqlSource(name, upstream.url)
    return client, name, Ingestion(spark, client, source, clock=lambda: next(clock))


ORDER_COLUMNS = ["id", "amount", "note", "at", "doc", "big", "flag", "tags", "raw", "ratio", "day"]
T0 = dt.datetime(2024, 5, 1, 12, 30, 15, 123456)


def model_orders(upstream: Upstream) -> list[Any]:
    rows = upstream.rows("orders", ", ".join(ORDER_COLUMNS))
    out = []
    for r in rows:
        values = list(r)
        values[0] = Decimal(values[0])  # bigint unsigned is stored as decimal(20, 0)
        at = values[3]
        values[3] = None if at is None else at.replace(tzinfo=dt.UTC)
        values[9] = None if values[9] is None else float(values[9])
        out.append(tuple(values))
    return sorted(out, key=repr)


def test_snapshot_then_changes_at_every_time_with_domains_restarts_and_two_instances(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.sql(
        "CREATE TABLE orders (id bigint unsigned PRIMARY KEY, amount decimal(10,2), "
        "note varchar(20), at timestamp(6) NULL, doc json, big longtext, "
        "flag enum('a','b'), tags set('x','y','z'), raw varbinary(8), ratio double, day date)"
    )
    upstream.sql("CREATE TABLE users (id int, name text)")
    insert = "INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    upstream.txn(
        (
            insert,
            (
                2**64 - 1,
                Decimal("10.50"),
                "a",
                T0,
                '{"k": 1}',
                "x" * 3000,
                "b",
                "x,z",
                b"\x00\xff",
                0.1,
                dt.date(2024, 2, 29),
            ),
        ),
        (insert, (2, None, None, None, None, None, None, "", None, None, None)),
        ("INSERT INTO users VALUES (7, 'ann'), (7, 'ann')", None),  # a duplicate row
    )
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    name = f"my_{uuid.uuid4().hex[:8]}"

    def ingestion() -> Ingestion:
        source = MySqlSource(name, upstream.url)
        assert sorted(source.outputs()) == ["orders", "users"]
        return Ingestion(spark, client, source, clock=lambda: next(clock), retain_history_ms=10**12)

    orders, users = f"{name}.orders", f"{name}.users"
    history: list[tuple[int, list[Any], list[Any]]] = []

    def step(ing: Ingestion) -> None:
        ing.step()
        upper = client.state(orders).upper.time
        assert upper is not None and client.state(users).upper.time == upper
        history.append((upper - 1, model_orders(upstream), upstream.rows("users", "id, name")))
        for at, o, u in history:  # every time bound so far still reads right
            assert_same(output_rows(client, orders, at, ORDER_COLUMNS), o, at)
            assert_same(output_rows(client, users, at, ["id", "name"]), u, at)

    first = ingestion()
    step(first)  # the snapshot
    assert len(history[-1][1]) == 2 and history[-1][2] == [(7, "ann"), (7, "ann")]
    assert {r[0] for r in history[-1][1]} == {Decimal(2), Decimal(2**64 - 1)}
    upstream.txn(
        ("UPDATE orders SET amount = %s, ratio = %s WHERE id = 2", (Decimal("11.25"), -1.5e300)),
        ("DELETE FROM orders WHERE id = %s", (2**64 - 1,)),
        (insert, (3, Decimal("-0.01"), "c", T0, "[1, 2]", "", "a", "y", b"", 2.5, None)),
    )
    upstream.txn(("DELETE FROM users WHERE id = %s", (7,)), domain=5)  # a new domain
    step(first)
    second = ingestion()  # a second instance, racing the first
    upstream.txn(("INSERT INTO users VALUES (%s, %s)", (8, None)), domain=5)
    upstream.txn(("UPDATE orders SET note = 'd', tags = 'x,y,z' WHERE id = 3", None))
    step(second)
    upstream.txn(("INSERT INTO users VALUES (%s, %s)", (9, "bo")), domain=6)
    step(first)
    first.close()
    step(second)  # nothing new: an idle step
    second.close()
    restarted = ingestion()  # resumes from its frontier: no second snapshot
    upstream.txn((insert, (4, Decimal("99999999.99"), "e", T0, "{}", "", None, "", None, 0, None)))
    upstream.txn(("UPDATE users SET name = 'cy' WHERE id = 9", None), domain=6)
    step(restarted)
    bound = restarted.remap.frontier_at(history[-1][0])
    assert {"0", "5", "6"} <= set(bound), bound
    restarted.close()


def test_the_server_settings_are_checked(upstream: Upstream) -> None:
    upstream.sql("CREATE TABLE t (id int)")
    upstream.sql("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        with pytest.raises(InvalidUsage, match="binlog_row_image=FULL"):
            MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url)
    finally:
        upstream.sql("SET GLOBAL binlog_row_image = 'FULL'")
    with pytest.raises(InvalidUsage, match=r"tables \['nope'\] are not in database"):
        MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url, tables=["nope"])
    upstream.sql("CREATE TABLE g (p point)")
    with pytest.raises(InvalidUsage, match="'point'"):
        MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url, tables=["g"])
    upstream.sql("CREATE TABLE m (id int) ENGINE=MyISAM")  # no consistent snapshot of it
    with pytest.raises(InvalidUsage, match="table 'm' uses engine 'MyISAM'"):
        MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url, tables=["m"])


def test_a_url_without_a_password_connects_with_mysql_pwd(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The URL a catalog keeps (no password) reaches the server with ``MYSQL_PWD``."""
    upstream.sql("CREATE TABLE t (id int PRIMARY KEY)")
    parts = urlsplit(upstream.url)
    bare = parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}").geturl()
    assert parts.password and urlsplit(bare).password is None
    monkeypatch.delenv("MYSQL_PWD", raising=False)
    with pytest.raises(SourceUnavailable, match="Access denied"):
        MySqlSource(f"my_{uuid.uuid4().hex[:8]}", bare, connect_timeout_s=5)
    monkeypatch.setenv("MYSQL_PWD", parts.password)
    source = MySqlSource(f"my_{uuid.uuid4().hex[:8]}", bare, connect_timeout_s=5)
    assert [t.name for t in source.tables] == ["t"]


def test_changes_between_the_origin_and_the_snapshot_are_rewound(
    spark: SparkSession, upstream: Upstream
) -> None:
    """The snapshot is taken after these commits, in two domains: it counts them once."""
    upstream.sql("CREATE TABLE t (id int, v varchar(5))")
    upstream.txn(("INSERT INTO t VALUES (1, 'a'), (2, 'b')", None))
    source = MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url)
    origin = source.upper()  # the first binding: the snapshot's point
    at_origin = upstream.rows("t", "id, v")
    upstream.txn(("INSERT INTO t VALUES (3, 'c')", None), domain=3)
    upstream.txn(("UPDATE t SET v = 'B' WHERE id = 2", None), ("DELETE FROM t WHERE id = 1", None))
    end = source.upper()
    upstream.txn(("INSERT INTO t VALUES (4, 'd')", None))  # past the end: not read
    rows = source.read(spark, {}, end, origin=origin)["t"].collect()
    snap: Counter[Any] = Counter()
    later: Counter[Any] = Counter()
    for r in rows:
        assert r["_err"] is None, r
        into = (
            snap
            if (r["_partition"], r["_offset"]) == (SNAPSHOT_PARTITION, origin["0"] - 1)
            else later
        )
        into[(r["id"], r["v"])] += r["_diff"]
        assert r["_offset"] < end.get(r["_partition"], 0)
    assert +snap == Counter(at_origin) and not -snap
    assert +(snap + later) == Counter(upstream.rows("t", "id, v")) - Counter({(4, "d"): 1})

    def consolidated(rows: list[Any]) -> Counter[Any]:
        out: Counter[Any] = Counter()
        for r in rows:
            out[(r["_partition"], r["_offset"], r["id"], r["v"])] += r["_diff"]
        return Counter({k: n for k, n in out.items() if n != 0})

    # A retried read takes a later snapshot (one more commit in each domain): same updates.
    upstream.txn(("UPDATE t SET v = 'C' WHERE id = 3", None), domain=3)
    upstream.txn(("DELETE FROM t WHERE id = 2", None))
    retried = source.read(spark, {}, end, origin=origin)["t"].collect()
    assert consolidated(retried) == consolidated(rows)
    with pytest.raises(InvalidUsage, match="needs the origin"):
        source.read(spark, {}, end)


def test_the_snapshot_is_one_read_view_whatever_the_sessions_isolation_level(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under READ COMMITTED InnoDB takes no snapshot at START TRANSACTION WITH CONSISTENT
    SNAPSHOT: each SELECT would see commits after the snapshot's GTID position, which
    the stream then replays (counted twice)."""
    from timeshard.storage import mysql_read

    upstream.sql("CREATE TABLE t (id int, v varchar(5))")
    upstream.txn(("INSERT INTO t VALUES (1, 'a')", None))
    source = MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url)
    origin = source.upper()
    columns = mysql_read.table_columns
    committed: list[str] = []

    def a_commit_first(conn: Any, database: str, table: str) -> Any:
        upstream.txn(("INSERT INTO t VALUES (2, 'b')", None))  # after the snapshot began
        committed.append(table)
        return columns(conn, database, table)

    monkeypatch.setattr(mysql_read, "table_columns", a_commit_first)
    conn = source.server.connect(text_only=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            until = binlog_end(cur)
        plan = ReadPlan(
            source.server, tuple(source.tables), origin, origin, until, until, snapshot=True
        )
        seen: dict[str, int] = {}
        rows = [r[5] for r in mysql_read._snapshot(conn, plan, seen)]
    finally:
        conn.close()
    assert committed == ["t"], "the patch did not reach the snapshot's reader"
    assert rows == [["1", "a"]]


def test_a_schema_change_errors_one_subsource_and_bad_values_are_err_rows(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.sql("CREATE TABLE a (id int, v text)")
    upstream.sql("CREATE TABLE b (id int, d date, at datetime)")
    upstream.sql("CREATE TABLE c (id int)")
    upstream.txn(("INSERT INTO a VALUES (1, 'one')", None), ("INSERT INTO c VALUES (1)", None))
    upstream.sql("SET SESSION sql_mode = ''")  # zero dates allowed
    upstream.txn(("INSERT INTO b VALUES (0, '2020-00-10', '2020-01-01 00:00:00')", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()
    upstream.txn(
        ("INSERT INTO b VALUES (1, '0000-00-00', NULL)", None),  # no Arrow date holds it
        ("INSERT INTO b VALUES (2, '2020-01-01', '2021-02-03 04:05:06')", None),
    )
    upstream.txn(("DELETE FROM b WHERE id = 0", None))  # retracts the snapshot's err row
    upstream.sql("ALTER TABLE a DROP COLUMN v")
    upstream.txn(("INSERT INTO a VALUES (2)", None), ("INSERT INTO b VALUES (3, NULL, NULL)", None))
    upstream.sql("TRUNCATE TABLE c")
    ing.step()
    upper = client.state(f"{name}.a").upper.time
    assert upper is not None
    a_rows = output_rows(client, f"{name}.a", upper - 1, ["id", "v"])
    assert (1, "one") in a_rows and len(a_rows) == 3, a_rows
    altered, dropped = sorted(r[1] for r in a_rows if r[0] == "ERR")
    assert altered.startswith("a: altered upstream by a statement that may change"), a_rows
    assert "upstream schema changed: column 'v' was dropped at GTID 0-" in dropped, a_rows
    b_rows = output_rows(client, f"{name}.b", upper - 1, ["id", "d", "at"])
    assert (2, dt.date(2020, 1, 1), dt.datetime(2021, 2, 3, 4, 5, 6)) in b_rows
    assert (3, None, None) in b_rows
    errs = [r for r in b_rows if r[0] == "ERR"]
    assert len(errs) == 1 and "column 'd' (date)" in errs[0][1], b_rows
    c_rows = output_rows(client, f"{name}.c", upper - 1, ["id"])
    assert len(c_rows) == 2 and (1,) in c_rows, c_rows
    [c_err] = [r for r in c_rows if r[0] == "ERR"]
    assert c_err[1].startswith("c: truncated upstream at GTID 0-"), c_rows
    ing.close()


def test_a_declared_mysql_source_feeds_a_view(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    from timeshard.controller import Pipeline
    from timeshard.spec import check_spec, load_spec

    upstream.sql("CREATE TABLE items (id int, price decimal(8,2))")
    upstream.txn(("INSERT INTO items VALUES (1, 2.50), (2, 4.00)", None))
    name = f"my_{uuid.uuid4().hex[:8]}"
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        f"""
[location]
dir = "{tmp_path / "loc"}"

[[source]]
name = "{name}"
kind = "mysql"
options = {{ url = "{upstream.url}" }}

[[view]]
name = "total"
inputs = {{ items = "{name}.items" }}
sql = "SELECT count(*) AS n, sum(price) AS s FROM items"
"""
    )
    spec = load_spec(spec_file)
    check_spec(spec, existing=[])
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    pipeline = Pipeline(spark, client, spec, view_tick_s=0.0)
    upstream.txn(("UPDATE items SET price = 10 WHERE id = 2", None))
    for _ in range(2):
        assert pipeline.step() == {}
    pipeline.views[0].catch_up(timeout_s=300)
    upper = client.state("total").upper.time
    assert upper is not None and upper > 0
    assert output_rows(client, "total", upper - 1, ["n", "s"]) == [(2, Decimal("12.50"))]
    pipeline.close()
    bad = spec_file.read_text().replace(
        'kind = "mysql"', 'kind = "mysql"\ncolumns = { a = "int64" }'
    )
    spec_file.write_text(bad)
    with pytest.raises(InvalidUsage, match="declare no columns"):
        check_spec(load_spec(spec_file), existing=[])


def test_floats_read_the_same_from_the_snapshot_and_the_binlog(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """The server prints a float with 6 digits; the snapshot reads it as a double instead."""
    upstream.sql("CREATE TABLE f (id int, x float, y double)")
    upstream.txn(("INSERT INTO f VALUES (1, 1.2345678, 0.1)", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()  # the snapshot
    upstream.txn(("INSERT INTO f VALUES (2, 1.2345678, 0.1)", None))
    ing.step()  # the binlog
    upper = client.state(f"{name}.f").upper.time
    assert upper is not None
    rows = output_rows(client, f"{name}.f", upper - 1, ["id", "x", "y"])
    x = float(np.float32(1.2345678))
    assert rows == [(1, x, 0.1), (2, x, 0.1)], rows
    ing.close()


def test_fixed_binary_values_read_the_same_from_the_snapshot_and_the_binlog(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """The server pads binary(n) with zero bytes; its row events drop the trailing ones: a
    row read by the snapshot and retracted from the binlog must be the same row."""
    upstream.sql("CREATE TABLE b (id int, v binary(4))")
    upstream.txn(("INSERT INTO b VALUES (1, x'61'), (2, x'01020300')", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()  # the snapshot
    upstream.txn(
        ("UPDATE b SET id = 3 WHERE id = 1", None), ("INSERT INTO b VALUES (4, x'62')", None)
    )
    ing.step()  # the binlog
    upper = client.state(f"{name}.b").upper.time
    assert upper is not None
    rows = output_rows(client, f"{name}.b", upper - 1, ["id", "v"])
    assert rows == upstream.rows("b", "id, v"), rows
    assert rows == [(2, b"\x01\x02\x03\x00"), (3, b"a\x00\x00\x00"), (4, b"b\x00\x00\x00")]
    ing.close()


def test_text_in_other_charsets_and_invalid_dates_from_the_binlog(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """pymysql read latin1 as Python's cp1252 (byte 0x81 failed), the library read utf16
    little-endian and ucs2/utf32 as UTF-8, and a date such as 2024-02-30 raised: the read
    task failed on every retry, or an UPDATE retracted a row the snapshot never inserted."""
    upstream.sql(
        "CREATE TABLE t (id int, l varchar(8) CHARACTER SET latin1, "
        "u16 varchar(8) CHARACTER SET utf16, u2 varchar(8) CHARACTER SET ucs2, "
        "u32 varchar(8) CHARACTER SET utf32, d date)"
    )
    insert = "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s)"
    texts = ("\x81\x8d\x8f\x90\x9d€é", "é😀", "é", "é😀", dt.date(2024, 2, 1))
    upstream.txn((insert, (1, *texts)))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()  # the snapshot
    upstream.txn(("UPDATE t SET id = 2 WHERE id = 1", None), (insert, (3, *texts)))
    upstream.sql("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
    upstream.txn(("INSERT INTO t (id, d) VALUES (4, '2024-02-30')", None))
    upstream.sql("SET SESSION sql_mode = DEFAULT")
    ing.step()  # the binlog
    upper = client.state(f"{name}.t").upper.time
    assert upper is not None
    rows = output_rows(client, f"{name}.t", upper - 1, ["id", "l", "u16", "u2", "u32", "d"])
    [err] = [r for r in rows if r[0] == "ERR"]
    assert [r for r in rows if r != err] == [(2, *texts), (3, *texts)], rows
    assert err[1].startswith("t: a row event does not decode: "), rows
    ing.close()
    upstream.sql("CREATE TABLE s (v varchar(4) CHARACTER SET swe7)")
    with pytest.raises(InvalidUsage, match="table 's' column 'v' has character set 'swe7'"):
        MySqlSource("m", upstream.url)


def test_an_unreachable_server_is_a_fault_not_data(
    spark: SparkSession, mariadb_server: Any, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.sql("CREATE TABLE t (id int)")
    upstream.txn(("INSERT INTO t VALUES (1)", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()
    upstream.txn(("INSERT INTO t VALUES (2)", None))
    mariadb_server.kill()  # as a crash
    try:
        with pytest.raises(SourceUnavailable, match="unreachable") as e:
            ing.step()
        assert not e.value.definite
        upper = client.state(STATUS_SHARD).upper.time
        assert upper is not None
        reader = client.open_leased_reader(STATUS_SHARD)
        status = {r["object"]: r["status"] for r in reader.snapshot(upper - 1).to_pylist()}
        reader.expire()
        assert status[f"{name}.t"] == "stalled", status
    finally:
        mariadb_server.start()
    upstream.conn = upstream.connect()
    upstream.sql(f"USE {quote(upstream.database)}")
    upstream.txn(("INSERT INTO t VALUES (3)", None))
    ing.step()
    upper = client.state(f"{name}.t").upper.time
    assert upper is not None
    assert output_rows(client, f"{name}.t", upper - 1, ["id"]) == [(1,), (2,), (3,)]
    ing.close()


def test_a_purged_binlog_is_a_definite_error(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.sql("CREATE TABLE t (id int)")
    upstream.txn(("INSERT INTO t VALUES (1)", None))
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    ing = Ingestion(
        spark,
        client,
        MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url),
        clock=lambda: next(clock),
    )
    ing.step()
    upstream.txn(("INSERT INTO t VALUES (2)", None))
    for _ in range(50):  # a file goes once the engines' checkpoint of it is done
        upstream.sql("FLUSH BINARY LOGS")
        files = [r[0] for r in upstream.sql("SHOW BINARY LOGS")]
        upstream.sql("PURGE BINARY LOGS TO %s", (files[-1],))
        if len(upstream.sql("SHOW BINARY LOGS")) == 1:
            break
        time.sleep(0.2)
    assert len(upstream.sql("SHOW BINARY LOGS")) == 1
    with pytest.raises(SourceUnavailable, match="was purged") as e:
        ing.step()
    assert e.value.definite
    ing.close()


def test_tables_truncated_dropped_or_renamed_upstream_are_err_rows(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """Names in backquotes (with a dot, a dash), comments, and a database qualifier."""
    for table in ("my-t", "a.b", "gone", "moved", "kept"):
        upstream.sql(f"CREATE TABLE {quote(table)} (id int)")
        upstream.txn((f"INSERT INTO {quote(table)} VALUES (1)", None))
    upstream.sql(
        "CREATE TABLE parts (id int) PARTITION BY RANGE (id) "
        "(PARTITION p0 VALUES LESS THAN (5), PARTITION p1 VALUES LESS THAN MAXVALUE)"
    )
    upstream.txn(("INSERT INTO parts VALUES (1), (7)", None))
    client, name, ing = started(spark, upstream, tmp_path)
    ing.step()  # the snapshot
    upstream.sql("/* why */ TRUNCATE TABLE `my-t`")
    upstream.sql(f"TRUNCATE {quote(upstream.database)}.`a.b`")
    upstream.sql("DROP TABLE IF EXISTS gone")
    upstream.sql("RENAME TABLE moved TO moved_away")
    upstream.sql("ALTER TABLE parts TRUNCATE PARTITION p1")  # 7 is gone, with no row event
    upstream.txn(("INSERT INTO kept VALUES (2)", None))
    ing.step()
    upper = client.state(f"{name}.kept").upper.time
    assert upper is not None
    assert output_rows(client, f"{name}.kept", upper - 1, ["id"]) == [(1,), (2,)]
    for table, change in [
        ("my-t", "truncated"),
        ("a.b", "truncated"),
        ("gone", "dropped"),
        ("moved", "renamed"),
        ("parts", "partly emptied"),
    ]:
        rows = output_rows(client, f"{name}.{table}", upper - 1, ["id"])
        assert (1,) in rows and len(rows) == (3 if table == "parts" else 2), (table, rows)
        [err] = [r for r in rows if r[0] == "ERR"]
        assert err[1].startswith(f"{table}: {change} upstream at GTID 0-"), (table, rows)
    ing.close()


def test_a_stream_that_ends_before_the_binlog_end_is_retried_not_cut(
    upstream: Upstream,
) -> None:
    """The server ends a non-blocking dump at its binlog end: short of ``until``, no rows."""
    upstream.sql("CREATE TABLE t (id int)")
    source = MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url)
    lo = source.upper()
    upstream.txn(("INSERT INTO t VALUES (1)", None))
    hi = source.upper()
    with upstream.conn.cursor() as cur:
        end = binlog_end(cur)
        first = start_position(cur, lo)
    plan = ReadPlan(source.server, tuple(source.tables), lo=lo, hi=hi, first=first, until=end)
    assert [r[3:] for r in stream_rows(plan, end, {})] == [(1, None, ["1"])]
    number = end[0].rpartition(".")[2]
    for beyond in (
        (end[0], end[1] + 10**6),  # later in the same file
        # The next file, with one more digit: as a string it sorts first.
        (end[0][: -len(number)] + str(int(number) + 1).zfill(len(number) + 1), 4),
    ):
        with pytest.raises(SourceUnavailable, match="binlog stream ended at") as e:
            list(stream_rows(plan, beyond, {}))
        assert not e.value.definite


def test_a_gtid_position_gone_backwards_is_a_definite_error(
    spark: SparkSession, tmp_path: Path
) -> None:
    """RESET MASTER on a server of its own (the shared one keeps its GTIDs for the others)."""
    from timeshard.dev.mariadb import MariaDBServer

    server = MariaDBServer(tmp_path / "mariadb")
    try:
        server.start()
    except Exception as e:
        server.cleanup()
        pytest.skip(f"MariaDB cannot start: {e}")
    try:
        upstream = Upstream(server)
        upstream.sql("CREATE TABLE t (id int)")
        for i in range(3):
            upstream.txn(("INSERT INTO t VALUES (%s)", (i,)))
        client = PersistClient(Location.embedded(tmp_path / "loc"))
        clock = itertools.count(1)
        name = f"my_{uuid.uuid4().hex[:8]}"

        def ingestion() -> Ingestion:
            source = MySqlSource(name, upstream.url)
            return Ingestion(spark, client, source, clock=lambda: next(clock))

        ing = ingestion()
        ing.step()
        upstream.sql("RESET MASTER")
        upstream.txn(("INSERT INTO t VALUES (%s)", (3,)))  # GTID 0-1-1 again
        with pytest.raises(SourceUnavailable, match="GTID position went backwards") as e:
            ing.step()
        assert e.value.definite
        ing.close()
        restarted = ingestion()  # resumed at the durable bindings: its upper sees it
        with pytest.raises(SourceUnavailable, match="GTID position went backwards") as e:
            restarted.step()
        assert e.value.definite
        restarted.close()
    finally:
        server.cleanup()


def test_a_restart_after_a_column_was_added_upstream_keeps_the_recorded_columns(
    spark: SparkSession, upstream: Upstream, tmp_path: Path
) -> None:
    """The catalog records each table's columns; a restart after ``ADD COLUMN`` keeps them
    (it built the source from upstream's columns: a schema other than the shard's, and the
    ingestion refused to start), and the row added since reads in the recorded columns."""
    upstream.sql("CREATE TABLE t (id int PRIMARY KEY, v int)")
    upstream.txn(("INSERT INTO t VALUES (1, 1)", None))
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    clock = itertools.count(1)
    name = f"my_{uuid.uuid4().hex[:8]}"

    def ingestion() -> Ingestion:
        return Ingestion(spark, client, MySqlSource(name, upstream.url), clock=lambda: next(clock))

    first = ingestion()
    first.step()
    first.close()
    upstream.sql("ALTER TABLE t ADD COLUMN w int")
    upstream.txn(("INSERT INTO t VALUES (2, 2, 20)", None))
    again = ingestion()
    again.step()
    upper = client.state(f"{name}.t").upper.time
    assert upper is not None
    assert output_rows(client, f"{name}.t", upper - 1, ["id", "v"]) == [(1, 1), (2, 2)]
    again.close()
