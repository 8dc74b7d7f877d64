"""What the MYSQL source makes of upstream changes that no row event shows, read without
Spark (the read task's rows, as :func:`read_rows` yields them, against a real MariaDB)."""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from typing import Any

import pymysql
import pytest

from timeshard.errors import InvalidUsage
from timeshard.storage.mysql_source import (
    MySqlSource,
    RawRow,
    ReadPlan,
    binlog_end,
    quote,
    read_rows,
    start_position,
)

pytestmark = [pytest.mark.mysql]


class Upstream:
    """One database of the test server."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.database = f"d_{uuid.uuid4().hex[:10]}"
        self.conn = pymysql.connect(
            host="127.0.0.1",
            port=server.port,
            user=server.user,
            password=server.password,
            autocommit=True,
            init_command="SET time_zone = '+00:00'",
        )
        self.sql(f"CREATE DATABASE {quote(self.database)}")
        self.sql(f"USE {quote(self.database)}")
        self.url = server.url.rsplit("/", 1)[0] + "/" + self.database

    def sql(self, query: str, params: Any = None) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall()


def read_raw(source: MySqlSource, start: dict[str, int], end: dict[str, int]) -> list[RawRow]:
    """The read task's rows of ``[start, end)`` (from the empty frontier: the snapshot at end)."""
    snapshot = not any(start.values())
    lo = dict(end) if snapshot else dict(start)
    with contextlib.closing(source.server.connect(text_only=True)) as conn, conn.cursor() as cur:
        until = binlog_end(cur)
        first = start_position(cur, lo)
    plan = ReadPlan(
        source.server,
        tuple(source.tables),
        lo=lo,
        hi=dict(end),
        first=first,
        until=until,
        snapshot=snapshot,
    )
    return list(read_rows(plan))


def shard(source: MySqlSource, rows: list[RawRow]) -> dict[str, Counter[Any]]:
    """Each table's rows (values or err) with their summed diffs, zeros left out."""
    out: dict[str, Counter[Any]] = {t.name: Counter() for t in source.tables}
    for sub, _, _, diff, err, values in rows:
        out[source.tables[sub].name][err or tuple(values or ())] += diff
    return {t: Counter({k: v for k, v in c.items() if v}) for t, c in out.items()}


def errors(counter: Counter[Any]) -> list[str]:
    return [k for k in counter if isinstance(k, str)]


def started(upstream: Upstream, **kwargs: Any) -> tuple[MySqlSource, dict[str, int], list[RawRow]]:
    source = MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url, **kwargs)
    origin = dict(source.upper())
    return source, origin, read_raw(source, {}, origin)


def test_alters_that_change_existing_values_are_err_rows(upstream: Upstream) -> None:
    upstream.sql("SET SESSION sql_mode = ''")
    for t in "abcd":
        upstream.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, x varchar(10), y varchar(10))")
        upstream.sql(f"INSERT INTO {t} VALUES (1, 'x  ', 'abcdef')")
    upstream.sql("CREATE TABLE ok (id int PRIMARY KEY)")
    source, origin, first = started(upstream)
    upstream.sql("ALTER TABLE a DROP COLUMN x, ADD COLUMN x varchar(10)")
    upstream.sql("ALTER TABLE b RENAME COLUMN x TO y, RENAME COLUMN y TO x")
    upstream.sql("ALTER TABLE c MODIFY x char(10)")
    upstream.sql("ALTER TABLE d MODIFY y varchar(3)")
    upstream.sql("ALTER TABLE ok ADD COLUMN z int, ADD INDEX (z)")
    for t in ("a", "b", "c", "d", "ok"):
        upstream.sql(f"UPDATE {t} SET id = 2")
    got = shard(source, first + read_raw(source, origin, dict(source.upper())))
    for t in "abcd":
        want = f"{t}: altered upstream by a statement that may change existing values: "
        assert want + _alter_of(t) in [e.split(" at GTID")[0] for e in errors(got[t])], got[t]
    assert got["ok"] == Counter()


def _alter_of(table: str) -> str:
    return {
        "a": "ALTER TABLE a DROP COLUMN x, ADD COLUMN x varchar(10)",
        "b": "ALTER TABLE b RENAME COLUMN x TO y, RENAME COLUMN y TO x",
        "c": "ALTER TABLE c MODIFY x char(10)",
        "d": "ALTER TABLE d MODIFY y varchar(3)",
    }[table]


def test_a_child_of_a_cascading_foreign_key_is_refused(upstream: Upstream) -> None:
    """InnoDB applies ON DELETE/UPDATE CASCADE, SET NULL and SET DEFAULT itself: the binlog
    has no row events of the child's changes."""
    upstream.sql("CREATE TABLE p (id int PRIMARY KEY)")
    upstream.sql(
        "CREATE TABLE f (id int PRIMARY KEY, pid int, CONSTRAINT `fk p` FOREIGN KEY (pid) "
        "REFERENCES p (id) ON UPDATE SET NULL)"
    )
    upstream.sql(
        "CREATE TABLE g (id int PRIMARY KEY, pid int, FOREIGN KEY (pid) REFERENCES p (id))"
    )
    with pytest.raises(InvalidUsage, match=r"table 'f'.*constraint 'fk p'.*ON UPDATE SET NULL"):
        MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url)
    source = MySqlSource(f"my_{uuid.uuid4().hex[:8]}", upstream.url, tables=["p", "g"])
    assert [t.name for t in source.tables] == ["g", "p"]


def test_a_row_image_without_every_column_is_an_err_row_not_a_lost_update(
    upstream: Upstream,
) -> None:
    upstream.sql("CREATE TABLE t (id int PRIMARY KEY, n int, b text)")
    upstream.sql("INSERT INTO t VALUES (1, 10, 'blob')")
    source, origin, first = started(upstream)
    upstream.sql("SET SESSION binlog_row_image = 'NOBLOB'")
    upstream.sql("UPDATE t SET n = 11 WHERE id = 1")
    got = shard(source, first + read_raw(source, origin, dict(source.upper())))["t"]
    [err] = errors(got)
    assert "column 'b' (text) is not in the row image" in err and "binlog_row_image" in err, got
    assert got[("1", "10", "blob")] == 1, got


def test_a_retried_first_read_after_a_restart_keeps_the_recorded_columns(
    upstream: Upstream,
) -> None:
    """A first read that failed, a table altered, then the retry in a new process: built
    again, the source took the table's columns from upstream (another output schema than
    the shard's, or rows of the new shape read as the old); pinned to the columns the
    catalog recorded, a tolerated change is ignored and an incompatible one is an err row."""
    upstream.sql("CREATE TABLE t (id int PRIMARY KEY, v int)")
    upstream.sql("INSERT INTO t VALUES (1, 1)")
    name = f"my_{uuid.uuid4().hex[:8]}"
    first = MySqlSource(name, upstream.url)
    origin = dict(first.upper())  # the first binding; its read fails
    recorded = {"table_columns": first.recorded_columns()}
    upstream.sql("ALTER TABLE t ADD COLUMN w int")
    again = MySqlSource(name, upstream.url)
    assert again.outputs() != first.outputs()
    again.pin_recorded(recorded)
    assert again.outputs() == first.outputs()
    assert shard(again, read_raw(again, {}, origin)) == {"t": Counter({("1", "1"): 1})}
    upstream.sql("ALTER TABLE t DROP COLUMN w, DROP COLUMN v, ADD COLUMN v int")
    third = MySqlSource(name, upstream.url)
    third.pin_recorded(recorded)
    (err,) = errors(shard(third, read_raw(third, {}, origin))["t"])
    assert err.startswith("t: altered upstream"), err
    with pytest.raises(InvalidUsage, match=r"recorded columns of 't' are not"):
        third.pin_recorded({"table_columns": {"t": [["id", "int"]]}})
