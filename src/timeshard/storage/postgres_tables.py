"""The tables of a POSTGRES source, as the server's catalog describes them.

A :class:`Table` is one table of the publication: where it is, its
subsource, the columns pgoutput sends of it and its OID, by which the
stream names it (:class:`Table`'s doc). The rest reads the server's catalog
about such tables, through an open psycopg connection, and writes nothing:
the publication's column lists and row filters (:func:`_published`), a
table's columns (:func:`_columns`), the partitions of a table whose
``REPLICA IDENTITY`` is not ``FULL`` (:func:`_partitions_not_full`), why a
table's columns now cannot be read as those declared
(:func:`incompatibility`, and :func:`_catalog_change` for what a Relation
message does not carry), and where a table's rows are stored with its
columns' catalog rows (:class:`StorageMark`, :func:`storage_marks`), which
tells a rewrite upstream that sent no change. What the source makes of each
finding is the module doc of :mod:`~timeshard.storage.postgres_source`.

What runs where: the driver checks the tables when it builds the source
(:class:`~timeshard.storage.postgres_source.PostgresSource`) and takes their
storage marks at the start of every read; the Spark tasks
(:mod:`~timeshard.storage.postgres_read`) check a table's columns before the
snapshot reads it and when the stream receives its Relation message.
:class:`Table` is a plain value of the read plan those tasks get.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.storage.pgoutput import ARRAYS, TIME, Column, arrow_type


@dataclass(frozen=True)
class Table:
    """A table of the publication: where it is, its subsource name, its columns and its OID.

    The stream names a table by its OID: a table renamed upstream is still
    this table, and one dropped and created again under its name is not.
    """

    schema: str
    name: str
    sub: str
    columns: tuple[Column, ...]
    oid: int

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, stored_type(c)) for c in self.columns])


def stored_type(column: Column) -> pa.DataType:
    """The Arrow type a column is stored as (``time`` as its text, ``time[]`` as a list of
    them: Spark has no time type)."""
    if column.type_oid == TIME:
        return pa.string()
    if ARRAYS.get(column.type_oid) == TIME:
        return pa.list_(pa.string())
    return arrow_type(column.type_oid, column.typmod)


def _published(
    conn: Any, publication: str
) -> dict[tuple[str, str], tuple[frozenset[str] | None, str | None]]:
    """Per table of ``publication``: its column list and its row filter, where it has them
    (PostgreSQL 15 on; before, neither exists)."""
    (version,) = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
    if version < 150000:
        return {}
    rows = conn.execute(
        "SELECT schemaname, tablename, attnames, rowfilter FROM pg_publication_tables "
        "WHERE pubname = %s",
        (publication,),
    ).fetchall()
    return {
        (schema, table): (None if names is None else frozenset(names), row_filter)
        for schema, table, names, row_filter in rows
    }


def _partitions_not_full(conn: Any, oid: int) -> list[str]:
    """The partitions of table ``oid`` (none if it is not partitioned) whose REPLICA
    IDENTITY is not FULL, qualified.

    A partitioned table published via its root sends the root's identity in its Relation
    message, but each change logs its old row as its partition's identity has it.
    """
    rows = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_partition_tree(%s::oid) p "
        "JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE p.relid <> %s::oid AND c.relkind = 'r' AND c.relreplident <> 'f' "
        "ORDER BY 1, 2",
        (oid, oid),
    ).fetchall()
    return [f"{schema}.{name}" for schema, name in rows]


def _columns(conn: Any, schema: str, table: str) -> tuple[Column, ...]:
    """The columns pgoutput sends of a table: not dropped, not generated."""
    rows = conn.execute(
        "SELECT a.attname, a.atttypid::int, a.atttypmod, a.attnum::int FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attgenerated = '' ORDER BY a.attnum",
        (schema, table),
    ).fetchall()
    reserved = [r[0] for r in rows if r[0].startswith("_")]
    if reserved:
        raise InvalidUsage(f"table {schema}.{table}: columns {reserved} start with '_' (reserved)")
    return tuple(Column(*row) for row in rows)


def incompatibility(declared: Sequence[Column], actual: Sequence[Column]) -> str | None:
    """Why ``actual`` columns cannot be read as ``declared`` (None: they can; new columns can)."""
    by_name = {c.name: c for c in actual}
    for column in declared:
        now = by_name.get(column.name)
        if now is None:
            return f"column {column.name!r} was dropped"
        if (now.type_oid, now.typmod) != (column.type_oid, column.typmod):
            return f"column {column.name!r} changed type"
        if column.attnum and now.attnum and now.attnum != column.attnum:
            return f"column {column.name!r} was dropped and added again"
    return None


def _catalog_change(conn: Any, oid: int, declared: Sequence[Column]) -> str | None:
    """Why table ``oid`` as the server's catalog has it now cannot be read as ``declared``,
    where a Relation message cannot tell (a column dropped and added again under its name
    and type, a partition whose REPLICA IDENTITY is not FULL); None if it can or is gone."""
    partial = _partitions_not_full(conn, oid)
    if partial:
        return f"the partitions {partial} have no REPLICA IDENTITY FULL"
    rows = conn.execute(
        "SELECT attname, atttypid::int, atttypmod, attnum::int FROM pg_attribute "
        "WHERE attrelid = %s::oid AND attnum > 0 AND NOT attisdropped",
        (oid,),
    ).fetchall()
    return incompatibility(declared, [Column(*row) for row in rows]) if rows else None


@dataclass(frozen=True)
class StorageMark:
    """Where a table's rows are stored (the ``relfilenode`` of it and of its partitions) and,
    per declared column, the transaction that last wrote its ``pg_attribute`` row and
    whether that row has a missing value (``atthasmissing``: a column added with a default,
    whose value older rows do not store)."""

    files: frozenset[int]
    columns: tuple[tuple[str, int, bool], ...]

    def rewritten_since(self, before: StorageMark) -> str | None:
        """Why the table's values may have changed with no change sent, since ``before``.

        ``ALTER TABLE ... ALTER COLUMN c TYPE t USING expr`` to the type ``c`` already has
        rewrites every row (new files) and writes ``c``'s catalog row, and logical
        replication sends nothing of it: its Relation message, if any, is the one before.
        A rewrite alone (``VACUUM FULL``, ``CLUSTER``, ``SET TABLESPACE``) keeps every
        value, and so does a catalog row written alone (``SET NOT NULL``, a type change
        that needs no rewrite). A rewrite also writes the catalog row of each column with
        a missing value, to clear it (the rows now store it): that is no change either.
        Both at once, between two checks, are taken as such an ALTER (a ``SET NOT NULL``
        and a ``VACUUM FULL`` between two reads also are; a ``USING`` on a column with a
        missing value is not seen).
        """
        if self.files == before.files:
            return None
        was = {name: (xmin, missing) for name, xmin, missing in before.columns}
        written = [
            name
            for name, xmin, missing in self.columns
            if name in was
            and was[name][0] != xmin
            and not (was[name][1] and not missing)  # a rewrite cleared the missing value
        ]
        if not written:
            return None
        return (
            f"rewritten upstream with its columns {written} altered (ALTER TABLE ... ALTER "
            "COLUMN ... TYPE ... USING?): its rows may have changed with no change sent"
        )


def storage_marks(conn: Any, tables: Sequence[Table]) -> dict[int, StorageMark]:
    """Each table's :class:`StorageMark` now, by index (a table that is gone has none).

    Two queries whatever the number of tables (it runs at the start of every read).
    """
    oids = sorted({t.oid for t in tables})
    files: dict[int, set[int]] = {}
    for oid, file in conn.execute(
        "SELECT t.oid::bigint, c.relfilenode::bigint FROM unnest(%s::oid[]) AS t(oid) "
        "JOIN pg_class c ON c.oid = t.oid "
        "OR c.oid IN (SELECT relid FROM pg_partition_tree(t.oid))",
        (oids,),
    ).fetchall():
        files.setdefault(oid, set()).add(file)
    written: dict[int, dict[str, tuple[int, bool]]] = {}
    for oid, name, xmin, missing in conn.execute(
        "SELECT attrelid::bigint, attname, xmin::text::bigint, atthasmissing FROM pg_attribute "
        "WHERE attrelid = ANY(%s::oid[]) AND attnum > 0 AND NOT attisdropped",
        (oids,),
    ).fetchall():
        written.setdefault(oid, {})[name] = (xmin, bool(missing))
    out: dict[int, StorageMark] = {}
    for index, table in enumerate(tables):
        if table.oid in files:
            declared = {c.name for c in table.columns}
            columns = written.get(table.oid, {})
            out[index] = StorageMark(
                frozenset(files[table.oid]),
                tuple(sorted((n, x, m) for n, (x, m) in columns.items() if n in declared)),
            )
    return out


__all__ = ["StorageMark", "Table", "incompatibility", "storage_marks", "stored_type"]
