"""Delta Lake exports: a shard to a Delta table through delta-rs, exactly once.

The progress lives in the table's own log, as Delta *application
transactions*: the app id ``<export id>`` carries the export's frontier and
``<export id>.version`` the deployment's version, both set by the commit
that writes the changes. The table property
``timeshard.export.<export id>.declared`` says how they were written (the
envelope and key columns, :attr:`~timeshard.storage.export.ShardExport.declaration`):
the first tick sets it, before its commit, and an export declared otherwise
does not go on from that progress. A tick's single Spark task reads them from the
table, goes on only if the frontier is still the one the driver planned from
and no newer version owns the table, and commits the changes at
``[frontier, upper)`` with the new frontier in **one Delta commit**. A task
that dies before the commit leaves nothing; one retried after it finds the
new frontier and writes nothing.

Envelopes:

* ``upsert``: a MERGE on ``key_columns`` (compared null-safely) of the net
  change per key: the key's row at ``upper - 1`` is updated or inserted, a
  key with no row left is deleted. So the table is the shard's snapshot at
  ``frontier - 1``. A key with more than one row at ``upper - 1`` among a
  tick's changes (two rows, or one row twice) is an error, as are the shard's
  err rows; nothing is committed then. So is a change that finds the table
  other than the shard at ``frontier - 1`` (the task reads the table's rows
  of the changed keys first, from the version the MERGE is made against): a
  key the tick gives a row without retracting one, which the table already
  has a row of (the key's second row came in a later tick than its first),
  or a key whose row the tick retracts or replaces, which the table has no
  row of, or several (the table was changed outside the export).
* ``append``: the changes themselves, with their ``_ts`` and ``_diff``,
  appended: the table is the shard's history from the export's start.

Either way a row the table refuses for its values (a null in a NOT NULL
column, a CHECK constraint it breaks) is an error, and nothing is committed:
it follows from the data, as the shard's err rows do.

The table is created with the shard's columns (and ``_ts``, ``_diff`` for
``append``) if it does not exist; an existing one must have them, of the same
Delta types. Column names must be plain identifiers
(``[A-Za-z_][A-Za-z0-9_]*``): the MERGE's predicate names them, quoted, and
holds no value. The driver side (the since hold, resuming) is
:class:`~timeshard.storage.export.ShardExport`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient
from timeshard.persist._internal.parts import DIFF, TS
from timeshard.storage.export import (
    DataError,
    ErrorNet,
    KeyChange,
    Progress,
    ShardExport,
    blocked_at,
    hashable,
    net_per_key,
    result,
)

ENVELOPES = ("upsert", "append")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DELETE = "__timeshard_delete"


class DeltaExport(ShardExport):
    """One shard to one Delta table (module doc)."""

    envelopes = ENVELOPES

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        shard: str,
        table_uri: str,
        *,
        envelope: str = "upsert",
        key_columns: Sequence[str] = (),
        export_id: str | None = None,
        version: int = 1,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.check_options(table_uri=table_uri)
        super().__init__(
            spark,
            client,
            shard,
            envelope=envelope,
            key_columns=key_columns,
            export_id=export_id or f"{shard}-to-delta",
            version=version,
        )
        self.table_uri = table_uri
        self.storage_options = dict(storage_options or {})
        with self._declaring():
            bad = [n for n in self.reader.schema.names if not _COLUMN.fullmatch(n)]
            if bad:
                raise InvalidUsage(
                    f"export {self.export_id!r}: columns {bad} are not plain identifiers "
                    "([A-Za-z_][A-Za-z0-9_]*), which a Delta MERGE predicate can name"
                )
            self._create()

    @classmethod
    def check_options(cls, *, table_uri: Any = None) -> None:
        if not isinstance(table_uri, str) or not table_uri:
            raise InvalidUsage(f"table_uri must be a path or URI, got {table_uri!r}")

    @property
    def target(self) -> str:
        return f"Delta table {self.table_uri!r}"

    @property
    def fresh_target(self) -> str:
        return (
            f"delete Delta table {self.table_uri!r}, whose log holds its progress (the export "
            "creates it again)"
        )

    def progress(self) -> Progress | None:
        from deltalake import DeltaTable

        table = DeltaTable(self.table_uri, storage_options=self.storage_options or None)
        return _progress(table, self.export_id)

    def _order(self) -> list[str]:
        return [*self.key_columns, TS]

    def _table_schema(self) -> pa.Schema:
        fields = list(self.reader.schema)
        if self.envelope == "append":
            fields += [pa.field(TS, pa.int64()), pa.field(DIFF, pa.int64())]
        return pa.schema(fields)

    def _create(self) -> None:
        from deltalake import DeltaTable, Schema, write_deltalake

        options = self.storage_options or None
        if DeltaTable.is_deltatable(self.table_uri, storage_options=options):
            table = DeltaTable(self.table_uri, storage_options=options)
            have = {f.name: str(f.type) for f in table.schema().fields}
            missing = [n for n in self._table_schema().names if n not in have]
            if missing:
                raise InvalidUsage(
                    f"export {self.export_id!r}: Delta table {self.table_uri!r} lacks the "
                    f"columns {missing}"
                )
            want = {f.name: str(f.type) for f in Schema.from_arrow(self._table_schema()).fields}
            other = {n: (have[n], t) for n, t in want.items() if have[n] != t}
            if other:  # the MERGE and the append would cast the values, or fail every tick
                raise InvalidUsage(
                    f"export {self.export_id!r}: Delta table {self.table_uri!r} has columns "
                    "of other types than the shard's (column: (table's, shard's)): "
                    f"{other}"
                )
            return
        empty = self._table_schema().empty_table()
        write_deltalake(self.table_uri, empty, mode="append", storage_options=options)

    def _task(self, lower: int, upper: int) -> Callable[[Iterable[pa.RecordBatch]], Any]:
        return _DeltaTask(
            uri=self.table_uri,
            storage_options=tuple(sorted(self.storage_options.items())),
            export_id=self.export_id,
            version=self.version,
            declared=self.declaration,
            envelope=self.envelope,
            key_columns=tuple(self.key_columns),
            schema_ipc=self._table_schema().serialize().to_pybytes(),
            data_columns=tuple(self.reader.schema.names),
            lower=lower,
            upper=upper,
        )


def _progress(table: Any, export_id: str) -> Progress | None:
    frontier = table.transaction_version(export_id)
    if frontier is None:
        return None
    version = table.transaction_version(f"{export_id}.version")
    return Progress(int(frontier), int(version or 1), declared=_declared(table, export_id))


def _declared(table: Any, export_id: str) -> str | None:
    """How the export's progress was written (module doc; None: not recorded)."""
    declared = table.metadata().configuration.get(_declared_property(export_id))
    return None if declared is None else str(declared)


def _declared_property(export_id: str) -> str:
    return f"timeshard.export.{export_id}.declared"


@dataclass(frozen=True)
class _DeltaTask:
    """The tick's single Spark task: one Delta commit (module doc)."""

    uri: str
    storage_options: tuple[tuple[str, str], ...]
    export_id: str
    version: int
    declared: str
    envelope: str
    key_columns: tuple[str, ...]
    schema_ipc: bytes
    data_columns: tuple[str, ...]
    lower: int
    upper: int

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from deltalake import DeltaTable

        options = dict(self.storage_options) or None
        table = DeltaTable(self.uri, storage_options=options)
        progress = _progress(table, self.export_id)
        if progress is not None and progress.version > self.version:
            yield result("fenced", 0, f"version {progress.version} owns the table")
            return
        if (progress.frontier if progress is not None else 0) != self.lower:
            yield result("stale", 0, f"the table's progress is {progress}, not {self.lower}")
            return
        declared = _declared(table, self.export_id)
        if declared != self.declared:
            if progress is not None and declared is not None:  # declared again meanwhile
                yield result("error", 0, f"the table's progress was written with {declared}")
                return
            table.alter.set_table_properties(
                {_declared_property(self.export_id): self.declared}, raise_if_not_exists=False
            )
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        try:
            if self.envelope == "append":
                held = list(batches)  # read twice: for the errors, then the rows
                blocked = blocked_at(held)
                upper = self.upper if blocked is None else blocked[0]
                if blocked is not None and upper == self.lower:
                    raise DataError(blocked[1])
                with _refusal(self.uri):
                    count = self._append(table, held, schema, self._commit(upper), upper)
                if blocked is not None:
                    yield result("blocked", count, blocked[1], upper)
                    return
            else:
                with _refusal(self.uri):
                    count = self._merge(table, batches, schema, self._commit(self.upper))
        except DataError as e:
            yield result("error", 0, str(e))
            return
        yield result("committed", count, None, self.upper)

    def _commit(self, upper: int) -> Any:
        """The commit's properties: the progress ``upper`` and this export's version."""
        from deltalake import CommitProperties, Transaction

        return CommitProperties(
            app_transactions=[
                Transaction(app_id=self.export_id, version=upper),
                Transaction(app_id=f"{self.export_id}.version", version=self.version),
            ]
        )

    def _append(
        self,
        table: Any,
        batches: Iterable[pa.RecordBatch],
        schema: pa.Schema,
        commit: Any,
        upper: int,
    ) -> int:
        from deltalake import write_deltalake

        ok = ErrorNet().ok_rows(batches, before=upper)
        rows = [{c: row[c] for c in schema.names} for row in ok]
        data = pa.Table.from_pylist(rows, schema=schema)
        write_deltalake(table, data, mode="append", commit_properties=commit)
        return int(data.num_rows)

    def _merge(
        self, table: Any, batches: Iterable[pa.RecordBatch], schema: pa.Schema, commit: Any
    ) -> int:
        from deltalake import write_deltalake

        errors = ErrorNet()
        changes = net_per_key(errors.ok_rows(batches), self.key_columns, self.data_columns)
        errors.check_none_left()
        _check_rows(table, changes, self.key_columns, schema)
        if not changes:  # nothing to merge: the commit still records the progress
            write_deltalake(table, schema.empty_table(), mode="append", commit_properties=commit)
            return 0
        flag = _delete_flag(self.data_columns)
        source_schema = schema.append(pa.field(flag, pa.bool_()))
        source = pa.Table.from_pylist(
            [_source_row(c, self.key_columns, self.data_columns, flag) for c in changes],
            schema=source_schema,
        )
        on = " AND ".join(f'(t."{k}" IS NOT DISTINCT FROM s."{k}")' for k in self.key_columns)
        columns = {f'"{c}"': f's."{c}"' for c in self.data_columns}
        (
            table.merge(
                source,
                predicate=on,
                source_alias="s",
                target_alias="t",
                commit_properties=commit,
            )
            .when_matched_delete(predicate=f's."{flag}"')
            .when_matched_update(updates=columns, predicate=f'NOT s."{flag}"')
            .when_not_matched_insert(updates=columns, predicate=f'NOT s."{flag}"')
            .execute()
        )
        return len(changes)


@contextlib.contextmanager
def _refusal(uri: str) -> Iterator[None]:
    """A write the table refuses for the rows' values (a null in a NOT NULL column, a CHECK
    constraint or invariant that a row breaks) as a DataError: it follows from the data,
    and every retry would meet it again. delta-rs raises it as a DeltaError that only its
    text tells from a fault."""
    from deltalake.exceptions import DeltaError

    try:
        yield
    except DeltaError as e:
        if _INVALID not in str(e):
            raise
        first = (str(e).splitlines() or [""])[0]
        raise DataError(f"Delta table {uri!r} refused a row: {first}") from None


_INVALID = "Invalid data found"


def _check_rows(
    table: Any, changes: list[KeyChange], key_columns: tuple[str, ...], schema: pa.Schema
) -> None:
    """DataError naming the first change the table's rows do not allow (module doc): an
    insert of a key the table has a row of, or a change of a key it has not exactly one
    row of. Reads the table's key columns, in the files whose statistics may hold a changed
    key (an integer or string key column without nulls prunes by them; the rows read are
    compared as Spark compares values, a NaN being one value)."""
    if not changes:
        return
    prune: list[tuple[str, str, Any]] = []
    for i, name in enumerate(key_columns):
        kind = schema.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_string(kind)):
            continue  # (a struct's or list's values are not even hashable)
        values = {c.key[i] for c in changes}
        if None not in values:
            prune.append((name, "in", sorted(values)))
    dataset = table.to_pyarrow_dataset(file_pruning_predicate=prune or None)
    wanted = {hashable(c.key) for c in changes}
    rows: dict[Any, int] = {}
    found = dataset.to_table(columns=list(key_columns))
    for row in found.to_pylist():
        key = hashable(tuple(row[k] for k in key_columns))
        if key in wanted:
            rows[key] = rows.get(key, 0) + 1
    uri = table.table_uri
    for change in changes:
        has = rows.get(hashable(change.key), 0)
        if change.had_row and has != 1:
            raise DataError(
                f"key {change.key!r}: Delta table {uri!r} has {has} rows of it, not the one "
                "the tick's change retracts; the table was changed outside the export"
            )
        if not change.had_row and change.row is not None and has:
            raise DataError(
                f"key {change.key!r}: Delta table {uri!r} already has a row of it, which the "
                "insert of the tick's change needs otherwise; the shard has two rows of that "
                "key (one from an earlier tick)"
            )


def _delete_flag(data_columns: tuple[str, ...]) -> str:
    """The name of the MERGE source's delete flag: none of the shard's columns."""
    flag = _DELETE
    while flag in data_columns:
        flag += "_"
    return flag


def _source_row(
    change: KeyChange, key_columns: tuple[str, ...], data_columns: tuple[str, ...], flag: str
) -> dict[str, Any]:
    """A MERGE source row: the key's new row, or its key; and the delete ``flag``."""
    if change.row is not None:
        return {**dict(zip(data_columns, change.row, strict=True)), flag: False}
    keys = dict(zip(key_columns, change.key, strict=True))
    return {**{c: keys.get(c) for c in data_columns}, flag: True}


__all__ = ["ENVELOPES", "DeltaExport"]
