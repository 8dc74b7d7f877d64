"""PostgreSQL exports: a shard kept in a table, exactly once, progress in the same database.

The target is a table keyed by ``key_columns`` (its primary key); the export
creates it if it does not exist, with the shard's columns (types in
:data:`PG_TYPES`, decimals as ``numeric``, arrays of those as PostgreSQL
arrays such as ``bigint[]``, and structs, maps and arrays of nested values as
``jsonb``: :func:`pg_type`), and checks an existing one
has them, of those types (else PostgreSQL would cast the values: a number
stored as text, a decimal rounded to a smaller scale), and a primary key or
unique index on exactly ``key_columns`` (which ``ON CONFLICT`` needs). A
table that was dropped after the export wrote to it is not created again: the
progress says it holds the changes below it (the refusal says how to start
over). The progress is a row
of ``_timeshard_progress`` (``export_id``, ``frontier``, ``version``,
``target``: the table it was written to, which must be the export's, and
``declared``: the key columns it was written with, which must be the
export's too) in the same database. A tick's single Spark task, in **one PostgreSQL
transaction**:

1. locks the export's progress row (``SELECT ... FOR UPDATE``), so two
   instances take turns; if it is no longer the frontier the driver planned
   from, another instance went first and the task writes nothing; if its
   version is newer than this export's, this export is fenced;
2. applies the changes at ``[frontier, upper)`` as their net effect per key:
   ``UPDATE`` for a key that had a row (the tick retracts one) and has one
   at ``upper - 1``, ``DELETE`` for one that has none left, ``INSERT`` for
   one that had none (a key with a NULL, which a table keyed by a unique
   index may hold, is matched with ``IS NULL``, and looked for before its
   insert: ``ON CONFLICT`` sees no NULL key);
3. sets the progress row to ``upper`` and commits.

So the table is the shard's snapshot at ``frontier - 1``, and a change is
applied once: a task that dies before the commit leaves nothing, one retried
after it finds the new frontier. A key with more than one row at ``upper - 1``
among a tick's changes (two rows, or one row twice) is an error
(:class:`~timeshard.storage.export.ExportError`), as are the shard's err rows;
nothing is committed then. So is a statement that finds the table other than
the shard at ``frontier - 1``: an ``INSERT`` of a key the table has a row of
(the key's second row came in a later tick than its first), an ``UPDATE`` or
``DELETE`` of a key it has no row of (the table was changed outside the export).

A ``jsonb`` column holds a struct as a JSON object of its fields, a map as a
JSON object of its entries (a key that is not a string as its JSON text: ``1``
as ``"1"``), an array as a JSON array; bytes, dates, decimals, NaN and
infinities as :func:`~timeshard.storage.export.to_json` writes them. A key
column is of a scalar type: a nested one is refused (InvalidUsage naming it).
A map comes consolidated with its entries sorted by key
(:func:`~timeshard.spark.snapshot.consolidate_df`), so a retraction whose
entries came in another order deletes the row it retracts.

SQL is composed with :mod:`psycopg.sql` (identifiers quoted by psycopg,
values always bound as parameters), never by concatenating names or values.
The driver side (the since hold, resuming) is
:class:`~timeshard.storage.export.ShardExport`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient
from timeshard.persist._internal.parts import TS
from timeshard.storage.export import (
    DataError,
    ErrorNet,
    KeyChange,
    Progress,
    ShardExport,
    net_per_key,
    result,
    to_json,
)
from timeshard.storage.export import json_value as _json_of  # its tests' name for it

PROGRESS_TABLE = "_timeshard_progress"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
#: Arrow type -> PostgreSQL column type of a table the export creates.
PG_TYPES: dict[pa.DataType, str] = {
    pa.int64(): "bigint",
    pa.int8(): "smallint",  # PostgreSQL has no one-byte integer
    pa.int32(): "integer",
    pa.int16(): "smallint",
    pa.float64(): "double precision",
    pa.float32(): "real",
    pa.string(): "text",
    pa.large_string(): "text",
    pa.bool_(): "boolean",
    pa.binary(): "bytea",
    pa.date32(): "date",
    pa.timestamp("us"): "timestamp",
    pa.timestamp("us", tz="UTC"): "timestamptz",
}


def pg_type(arrow: pa.DataType) -> str | None:
    """The PostgreSQL column type of a table the export creates (None: none here): the
    scalars of :data:`PG_TYPES`, decimals as ``numeric``, an array of a scalar as that
    scalar's array, a struct, a map or an array of nested values (which a PostgreSQL
    array, rectangular and of scalars, cannot hold) as ``jsonb``."""
    if pa.types.is_decimal(arrow):
        return f"numeric({arrow.precision}, {arrow.scale})"
    if _is_list(arrow):
        element = arrow.value_type
        if _is_nested(element):
            return "jsonb"
        scalar = pg_type(element)
        return None if scalar is None else f"{scalar}[]"
    if _is_nested(arrow):
        return "jsonb"
    return PG_TYPES.get(arrow)


def _is_list(arrow: pa.DataType) -> bool:
    return bool(pa.types.is_list(arrow) or pa.types.is_large_list(arrow))


def _is_nested(arrow: pa.DataType) -> bool:
    """An array, a struct or a map: no key column's type (module doc)."""
    return bool(_is_list(arrow) or pa.types.is_struct(arrow) or pa.types.is_map(arrow))


def _is_jsonb(arrow: pa.DataType) -> bool:
    return pg_type(arrow) == "jsonb"


def _pg_column(field: pa.Field) -> tuple[str, str, int]:
    """A column's name, its type's name and type modifier (as ``pg_attribute`` has them)."""
    arrow = field.type
    array = _is_list(arrow) and pa.types.is_decimal(arrow.value_type)
    decimal = arrow.value_type if array else arrow
    if pa.types.is_decimal(decimal):
        modifier = (decimal.precision << 16 | decimal.scale) + 4  # + VARHDRSZ
        return field.name, "numeric[]" if array else "numeric", modifier
    return field.name, str(pg_type(arrow)), -1


def _jsonb(value: Any, arrow: pa.DataType) -> Any:
    """The parameter of a ``jsonb`` column's value (SQL NULL for None)."""
    from psycopg.types.json import Jsonb

    if value is None:
        return None
    return Jsonb(_json_of(value, arrow), dumps=lambda v: to_json(v).decode())


class PostgresExport(ShardExport):
    """One shard kept in one PostgreSQL table (module doc)."""

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        shard: str,
        dsn: str,
        table: str,
        *,
        key_columns: Sequence[str],
        export_id: str | None = None,
        version: int = 1,
        schema: str = "public",
    ) -> None:
        self.check_options(dsn=dsn, table=table, schema=schema)
        super().__init__(
            spark,
            client,
            shard,
            envelope="upsert",
            key_columns=key_columns,
            export_id=export_id or f"{shard}-to-{schema}.{table}",
            version=version,
        )
        self.dsn = dsn
        self.table = table
        self.schema = schema
        with self._declaring():
            self._prepare()

    @classmethod
    def check_options(cls, *, dsn: Any = None, table: Any = None, schema: Any = "public") -> None:
        if not isinstance(dsn, str) or not dsn:
            raise InvalidUsage(f"dsn must be a PostgreSQL connection string, got {dsn!r}")
        for what, value in (("table", table), ("schema", schema)):
            if not isinstance(value, str) or not _NAME.fullmatch(value):
                raise InvalidUsage(
                    f"{what} must be a PostgreSQL name ([A-Za-z_][A-Za-z0-9_]*, at most 63), "
                    f"got {value!r}"
                )

    @property
    def target(self) -> str:
        return f"table {self.schema}.{self.table} (progress in {self.schema}.{PROGRESS_TABLE})"

    def progress(self) -> Progress | None:
        import psycopg
        from psycopg import sql

        query = sql.SQL(
            "SELECT frontier, version, target, declared FROM {} WHERE export_id = %s"
        ).format(sql.Identifier(self.schema, PROGRESS_TABLE))
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(query, (self.export_id,)).fetchone()
        return None if row is None else Progress(int(row[0]), int(row[1]), row[2], row[3])

    @property
    def identity(self) -> str:
        return f"table {self.schema}.{self.table}"

    @property
    def fresh_target(self) -> str:
        return (
            f"delete its progress row (DELETE FROM {self.schema}.{PROGRESS_TABLE} WHERE "
            f"export_id = '{self.export_id}') and empty or drop table {self.schema}.{self.table}, "
            "which gets the shard's rows again"
        )

    def _order(self) -> list[str]:
        return [*self.key_columns, TS]

    def _task(self, lower: int, upper: int) -> Callable[[Iterable[pa.RecordBatch]], Any]:
        return _ApplyTask(
            dsn=self.dsn,
            schema=self.schema,
            table=self.table,
            export_id=self.export_id,
            version=self.version,
            identity=self.identity,
            declared=self.declaration,
            key_columns=tuple(self.key_columns),
            data_columns=tuple(self.reader.schema.names),
            lower=lower,
            upper=upper,
            jsonb=tuple(f.type if _is_jsonb(f.type) else None for f in self.reader.schema),
        )

    def _prepare(self) -> None:
        """Create the progress table, and the target table unless it exists (driver)."""
        import psycopg
        from psycopg import sql

        columns = list(self.reader.schema)
        untyped = [f.name for f in columns if pg_type(f.type) is None]
        if untyped:
            raise InvalidUsage(
                f"export {self.export_id!r}: columns {untyped} of shard {self.shard!r} have no "
                f"PostgreSQL type here; supported are {sorted(map(str, PG_TYPES))}, decimals, "
                "arrays of those, structs and maps"
            )
        nested = {
            k: str(self.reader.schema.field(k).type)
            for k in self.key_columns
            if _is_nested(self.reader.schema.field(k).type)
        }
        if nested:
            raise InvalidUsage(
                f"export {self.export_id!r}: key columns {nested} (column: type) of shard "
                f"{self.shard!r} are nested; a key column is of a scalar type"
            )
        progress = sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (export_id text PRIMARY KEY, "
            "frontier bigint NOT NULL, version bigint NOT NULL)"
        ).format(sql.Identifier(self.schema, PROGRESS_TABLE))
        identified = sql.SQL(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS target text, "
            "ADD COLUMN IF NOT EXISTS declared text"
        ).format(sql.Identifier(self.schema, PROGRESS_TABLE))
        target = sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
            sql.Identifier(self.schema, self.table),
            sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(str(pg_type(f.type))))
                for f in columns
            ),
            sql.SQL(", ").join(map(sql.Identifier, self.key_columns)),
        )
        dropped = sql.SQL(
            "SELECT frontier FROM {} WHERE export_id = %s AND (target IS NULL OR target = %s) "
            "AND frontier > 0 AND to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NULL"
        ).format(sql.Identifier(self.schema, PROGRESS_TABLE))
        with psycopg.connect(self.dsn) as conn:
            conn.execute(progress)
            conn.execute(identified)  # a progress table from before these were recorded
            gone = conn.execute(
                dropped, (self.export_id, self.identity, self.schema, self.table)
            ).fetchone()
            if gone is not None:
                raise InvalidUsage(
                    f"export {self.export_id!r}: table {self.schema}.{self.table} does not "
                    f"exist, though {self.schema}.{PROGRESS_TABLE} records that the export "
                    f"wrote the changes below {gone[0]} to it (it was dropped): a table "
                    f"created now would lack them. Restore the table, or start over. "
                    f"{self._start_over()}"
                )
            conn.execute(target)
            have: dict[str, str] = dict(
                conn.execute(
                    "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text)) "
                    "AND attnum > 0 AND NOT attisdropped",
                    (self.schema, self.table),
                ).fetchall()
            )
            want: dict[str, str] = dict(
                conn.execute(
                    "SELECT name, format_type(type::regtype, modifier) "
                    "FROM unnest(%s::text[], %s::text[], %s::int[]) AS c(name, type, modifier)",
                    [list(c) for c in zip(*map(_pg_column, columns), strict=True)],
                ).fetchall()
            )
            unique = [
                set(r[0])
                for r in conn.execute(
                    "SELECT array_agg(a.attname::text) FROM pg_index i "
                    "JOIN pg_attribute a ON a.attrelid = i.indrelid "
                    "AND a.attnum = ANY((i.indkey::int2[])[0:i.indnkeyatts - 1]) "  # no INCLUDE
                    "WHERE i.indrelid = to_regclass(format('%%I.%%I', %s::text, %s::text)) "
                    "AND i.indisunique AND i.indisvalid AND i.indimmediate "
                    "AND i.indpred IS NULL AND i.indexprs IS NULL GROUP BY i.indexrelid",
                    (self.schema, self.table),
                )
            ]
        missing = [f.name for f in columns if f.name not in have]
        if missing:
            raise InvalidUsage(
                f"export {self.export_id!r}: table {self.schema}.{self.table} lacks the "
                f"columns {missing} of shard {self.shard!r}"
            )
        other = {n: (have[n], t) for n, t in want.items() if have[n] != t}
        if other:  # values cast to the table's types (a number as text), or every tick failed
            raise InvalidUsage(
                f"export {self.export_id!r}: table {self.schema}.{self.table} has columns of "
                f"other types than the export writes (column: (table's, shard's)): {other}"
            )
        if set(self.key_columns) not in unique:  # what ON CONFLICT (keys) needs
            raise InvalidUsage(
                f"export {self.export_id!r}: table {self.schema}.{self.table} has no primary "
                f"key or unique index on exactly the key columns {self.key_columns}"
            )


@dataclass(frozen=True)
class _ApplyTask:
    """The tick's single Spark task: one PostgreSQL transaction (module doc)."""

    dsn: str
    schema: str
    table: str
    export_id: str
    version: int
    identity: str
    declared: str
    key_columns: tuple[str, ...]
    data_columns: tuple[str, ...]
    lower: int
    upper: int
    #: Per data column, its Arrow type if it is a ``jsonb`` column (else None).
    jsonb: tuple[pa.DataType | None, ...] = ()

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import psycopg

        with psycopg.connect(self.dsn) as conn:
            try:
                with conn.transaction():
                    status, count, detail = self._apply(conn, batches)
                    if status != "committed":
                        raise _Rollback(status, detail)
            except _Rollback as r:
                yield result(r.status, 0, r.detail)
                return
            except DataError as e:
                yield result("error", 0, str(e))
                return
            except (psycopg.DataError, psycopg.IntegrityError) as e:
                # SQLSTATE classes 22 and 23 (and psycopg's refusal of a NUL byte): the
                # table cannot hold these rows, which follows from the data, not a fault.
                first = (str(e).splitlines() or [""])[0]
                yield result("error", 0, f"table {self.schema}.{self.table} refused a row: {first}")
                return
        yield result("committed", count, None)

    def _apply(self, conn: Any, batches: Iterable[pa.RecordBatch]) -> tuple[str, int, str | None]:
        from psycopg import sql

        progress = sql.Identifier(self.schema, PROGRESS_TABLE)
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (export_id, frontier, version) VALUES (%s, 0, %s) "
                "ON CONFLICT (export_id) DO NOTHING"
            ).format(progress),
            (self.export_id, self.version),
        )
        frontier, version = conn.execute(
            sql.SQL("SELECT frontier, version FROM {} WHERE export_id = %s FOR UPDATE").format(
                progress
            ),
            (self.export_id,),
        ).fetchone()
        if version > self.version:
            return "fenced", 0, f"version {version} owns the table"
        if frontier != self.lower:
            return "stale", 0, f"the table's progress is {frontier}, not {self.lower}"
        errors = ErrorNet()
        changes = net_per_key(errors.ok_rows(batches), self.key_columns, self.data_columns)
        errors.check_none_left()
        with conn.cursor() as cur:
            self._apply_changes(cur, changes)
        conn.execute(
            sql.SQL(
                "UPDATE {} SET frontier = %s, version = %s, target = %s, declared = %s "
                "WHERE export_id = %s"
            ).format(progress),
            (self.upper, self.version, self.identity, self.declared, self.export_id),
        )
        return "committed", len(changes), None

    def _apply_changes(self, cur: Any, changes: list[KeyChange]) -> None:
        """Apply each key's change as one statement (:meth:`_statement`), deletes first;
        DataError naming the first change the table's rows do not allow."""
        table = f"{self.schema}.{self.table}"
        for kind in ("delete", "insert", "update"):
            by_nulls: dict[tuple[bool, ...], list[tuple[tuple[Any, ...], tuple[Any, ...]]]] = {}
            for change in self._params(kind, changes):
                by_nulls.setdefault(tuple(v is None for v in change[0]), []).append(change)
            for nulls, group in by_nulls.items():
                if kind == "insert" and any(nulls):  # ON CONFLICT never sees a NULL key
                    found = [(key, _not_null(key)) for key, _ in group]
                    _apply_each(cur, kind, self._statement("found", nulls), found, table, hit=False)
                _apply_each(cur, kind, self._statement(kind, nulls), group, table)

    def _statement(self, kind: str, nulls: tuple[bool, ...]) -> Any:
        """The statement of one key's change, returning the row it hit: ``insert`` for a
        key the tick gave a row and retracted none (the table must have no row of it),
        ``update`` for one that had a row and has another, ``delete`` for one with none
        left (the table must have its row); ``found`` finds a key's row. ``nulls`` says
        which key columns are NULL in the keys it is run for: those are matched with IS
        NULL (``k = NULL`` is never true), the others with ``=``, which an index serves."""
        from psycopg import sql

        table = sql.Identifier(self.schema, self.table)
        where = sql.SQL(" AND ").join(
            sql.SQL("{} IS NULL" if null else "{} = %s").format(sql.Identifier(k))
            for k, null in zip(self.key_columns, nulls, strict=True)
        )
        if kind == "found":
            return sql.SQL("SELECT 1 FROM {} WHERE {} LIMIT 1").format(table, where)
        if kind == "delete":
            return sql.SQL("DELETE FROM {} WHERE {} RETURNING 1").format(table, where)
        if kind == "insert":
            return sql.SQL(
                "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO NOTHING RETURNING 1"
            ).format(
                table,
                sql.SQL(", ").join(map(sql.Identifier, self.data_columns)),
                sql.SQL(", ").join(sql.Placeholder() * len(self.data_columns)),
                sql.SQL(", ").join(map(sql.Identifier, self.key_columns)),
            )
        values = [c for c in self.data_columns if c not in self.key_columns]
        return sql.SQL("UPDATE {} SET {} WHERE {} RETURNING 1").format(
            table,
            sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in values),
            where,
        )

    def _params(
        self, kind: str, changes: list[KeyChange]
    ) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        """``(key, parameters)`` of the changes that ``kind`` of statement applies (a key's
        NULLs are no parameters: :meth:`_statement` matches them with IS NULL). A key of
        only key columns changes by insert and delete alone."""
        if kind == "delete":
            return [(c.key, _not_null(c.key)) for c in changes if c.row is None]
        if kind == "insert":
            return [
                (c.key, self._values(c.row)) for c in changes if c.row is not None and not c.had_row
            ]
        values = [i for i, c in enumerate(self.data_columns) if c not in self.key_columns]
        if not values:
            return []
        updates = [(c.key, self._values(c.row)) for c in changes if c.row is not None and c.had_row]
        return [(key, tuple(row[i] for i in values) + _not_null(key)) for key, row in updates]

    def _values(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """A row's parameters: a ``jsonb`` column's value as JSON (module doc)."""
        if not any(self.jsonb):
            return row
        return tuple(
            v if arrow is None else _jsonb(v, arrow)
            for v, arrow in zip(row, self.jsonb, strict=True)
        )


def _not_null(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """The values of ``key`` that are parameters of its statements (module doc)."""
    return tuple(v for v in key if v is not None)


def _apply_each(
    cur: Any,
    kind: str,
    query: Any,
    params: list[tuple[tuple[Any, ...], tuple[Any, ...]]],
    table: str,
    *,
    hit: bool = True,
) -> None:
    """Run ``query`` once per parameters; DataError naming the first key whose statement
    hit no row (an insert that found a row of its key, an update or delete that found none),
    or with ``hit`` False one that found a row (a key the insert needs absent): the table
    does not hold the shard's rows at the progress."""
    if not params:
        return
    cur.executemany(query, [p for _, p in params], returning=True)
    for key, _ in params:
        if bool(cur.fetchall()) != hit:
            found = "already has a row" if kind == "insert" else "has no row"
            raise DataError(
                f"key {key!r}: table {table} {found} of it, which the {kind} of the tick's "
                "change needs otherwise; "
                + (
                    "the shard has two rows of that key (one from an earlier tick)"
                    if kind == "insert"
                    else "the table was changed outside the export"
                )
            )
        cur.nextset()


class _Rollback(Exception):
    def __init__(self, status: str, detail: str | None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


__all__ = ["PG_TYPES", "PROGRESS_TABLE", "PostgresExport", "pg_type"]
