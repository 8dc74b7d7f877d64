"""The tables of a MYSQL source, as the server's ``information_schema`` describes them.

A :class:`Table` is one table of the database: its name (the subsource's)
and its columns, typed as :mod:`timeshard.storage.mysql_types` says
(:func:`table_columns` reads them). :func:`_refuse_cascades` refuses a
table that is the child of a cascading foreign key, whose changes the
binlog does not have; :func:`_schema_change` is why a table's columns now
cannot be read as those declared. What the source makes of each is the
module doc of :mod:`~timeshard.storage.mysql_source`.

What runs where: the driver reads the tables when it builds the source
(:class:`~timeshard.storage.mysql_source.MySqlSource`); the Spark read task
(:mod:`~timeshard.storage.mysql_read`) reads each table's columns again in
its snapshot, before it reads the rows. :class:`Table` is a plain value of
the read plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.storage.mysql_server import _text
from timeshard.storage.mysql_types import Column, column_from_schema


@dataclass(frozen=True)
class Table:
    """A table of the database: its name (the subsource's) and its columns."""

    name: str
    columns: tuple[Column, ...]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow_type()) for c in self.columns])


def _refuse_cascades(source: str, conn: Any, database: str, names: Sequence[str]) -> None:
    """Raises ``InvalidUsage`` for a table that is the child of a foreign key with ``ON
    DELETE|UPDATE CASCADE|SET NULL|SET DEFAULT``: InnoDB applies those itself, and the
    binlog has no row events of the child's changes."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_NAME, CONSTRAINT_NAME, DELETE_RULE, UPDATE_RULE "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = %s "
            "ORDER BY TABLE_NAME, CONSTRAINT_NAME",
            (database,),
        )
        rows = [tuple(_text(v) for v in r) for r in cur.fetchall()]
    for table, constraint, on_delete, on_update in rows:
        actions = [
            f"ON {event} {rule}"
            for event, rule in (("DELETE", on_delete), ("UPDATE", on_update))
            if rule.upper() in ("CASCADE", "SET NULL", "SET DEFAULT")
        ]
        if table in names and actions:
            raise InvalidUsage(
                f"MYSQL source {source!r}: table {table!r} is the child of foreign key "
                f"constraint {constraint!r} with {' and '.join(actions)}, whose changes of "
                "its rows are not in the binlog: leave the table out of tables, or make the "
                "constraint RESTRICT or NO ACTION"
            )


def table_columns(conn: Any, database: str, table: str) -> tuple[Column, ...]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
            "DATETIME_PRECISION, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        rows = cur.fetchall()
    out = []
    for row in rows:
        name, data_type, column_type, precision, scale, fsp, charset = (
            None if v is None else _text(v) for v in row
        )
        assert name is not None and data_type is not None and column_type is not None, row
        out.append(
            column_from_schema(
                name,
                data_type,
                column_type,
                None if precision is None else int(precision),
                None if scale is None else int(scale),
                None if fsp is None else int(fsp),
                charset,
            )
        )
    return tuple(out)


def _schema_change(declared: Sequence[Column], actual: Sequence[Column]) -> str | None:
    by_name = {c.name: c for c in actual}
    for column in declared:
        now = by_name.get(column.name)
        if now is None:
            return f"upstream schema changed: column {column.name!r} was dropped"
        if now != column:
            return f"upstream schema changed: column {column.name!r} changed type"
    names = [c.name for c in declared]
    if [c.name for c in actual][: len(names)] != names:
        return f"upstream schema changed: its columns are no longer in the order {names}"
    return None


__all__ = ["Table", "table_columns"]
