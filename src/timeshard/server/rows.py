"""The rows of ``timeshard serve``'s queries and SUBSCRIBEs, as Spark makes them.

A query's rows (:class:`QueryRows`) come one partition of its result at a time,
each partition's Spark job run when the rows before it are taken, and hold the
readers of the shards the query reads until the last row is taken, a job fails,
or they are closed. Before its rows are taken, a query's plan is made collectable
and described as it was (:func:`_months_of_intervals`,
:func:`_calendar_intervals_as_text`: PySpark collects no year-month nor calendar
interval) and typed as its prepared statement's Describe answered (:func:`_typed_as`).
A SUBSCRIBE's rows (:func:`_subscribe_rows`) are its snapshot, then the updates after
it, until its ``UP TO``. A Spark failure is a
:class:`~timeshard.server.sql_tokens.SqlError` (:func:`spark_error`).

Everything here runs on the Spark driver: it plans, and takes rows from the jobs
it starts.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, SinceError, TimeshardError
from timeshard.persist import Progress, Updates
from timeshard.persist.as_of import common_as_of
from timeshard.server.pgtypes import column_type
from timeshard.server.sql_tokens import SqlError, integer_input_error


class QueryRows:
    """A SELECT's rows as Spark makes them: its columns, and an iterator of its rows
    (a SUBSCRIBE's too: :meth:`close` lets go of its reader even if no row was read).

    The rows come one partition of the result at a time, each partition's Spark
    job run when the rows before it have been taken, so the driver never holds
    more than one partition of the result. The iterator holds the readers of the
    shards the query reads until its last row is taken, it fails, or
    :meth:`close` (any thread but one taking rows; twice is once): then no job
    of it runs again. A Spark failure while rows are taken is a :class:`SqlError`
    (:func:`spark_error`). The readers' leases are renewed by the client's background
    heartbeats for as long as the rows are held (a suspended portal, a cursor); if a
    lease runs out all the same, the next job's failure is SqlError 72000, saying the
    snapshot expired.
    """

    def __init__(
        self,
        columns: list[tuple[str, str]],
        rows: Generator[tuple[Any, ...], None, None],
        readers: dict[str, Any],
    ) -> None:
        self.columns = columns
        self._rows = rows
        self._readers = readers

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return self

    def __next__(self) -> tuple[Any, ...]:
        return next(self._rows)

    def close(self) -> None:
        if inspect.getgeneratorstate(self._rows) == inspect.GEN_CREATED:
            # Never started: its own cleanup (expiring the readers) would never run.
            for reader in self._readers.values():
                reader.expire()
        self._rows.close()


def _query_rows(
    partitions: Iterator[Any], readers: dict[str, Any]
) -> Generator[tuple[Any, ...], None, None]:
    """The rows of ``partitions`` (PySpark's ``toLocalIterator``), then the readers expired.

    Closing PySpark's iterator tells its JVM side to run no other partition's job
    (it reads the rest of the partition under way, already on the driver). A job that
    fails once a reader's lease ran out (its parts may be gone) is SqlError 72000
    (:func:`_expired_snapshot`), not the blob store's "file does not exist"."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        for row in partitions:
            yield tuple(row)
    except (PySparkException, Py4JJavaError) as e:
        raise (_expired_snapshot(readers) or spark_error(e)) from e
    finally:
        close = getattr(partitions, "close", None)
        if close is not None:
            close()
        del partitions  # PySpark's iterator stops its JVM side once it is collected
        for reader in readers.values():
            reader.expire()


def _expired_snapshot(readers: dict[str, Any]) -> SqlError | None:
    """SqlError 72000 (snapshot_too_old) if a reader of ``readers`` lost its lease (GC may
    have deleted the parts it planned to read), else None. Asked only once a job failed:
    one fetch of each shard's state, nothing on the way of rows that are read."""
    for shard, reader in readers.items():
        lost = reader.lease_lost
        if not lost:
            try:
                lost = reader.reader_id not in reader.fetch_recent_state().leased_readers
            except TimeshardError:  # unreadable now: the job's own error says what failed
                continue
        if lost:
            return SqlError(
                f"the snapshot of {shard!r} this query reads expired: its reader's lease ran "
                "out before its rows were read, and the parts it planned may be gone; run "
                "the query again",
                "72000",
            )
    return None


def spark_error(e: Exception) -> SqlError:
    """A Spark failure as a client sees it: the first line of the message and the
    SQLSTATE of the first error in its causes that has one (a query's DIVIDE_BY_ZERO,
    inside the failed job's error, inside the row iterator's), else of ``e`` with
    XX000."""
    from py4j.java_gateway import is_instance_of
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if isinstance(e, PySparkException) and e.getSqlState():
        cast = _cast_error(e.getCondition(), e.getMessageParameters() or {})
        return cast or SqlError(_first_line(e.getMessage() or str(e)), e.getSqlState() or "XX000")
    if isinstance(e, Py4JJavaError):
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        cause = e.java_exception
        while cause is not None and gateway is not None:
            if is_instance_of(gateway, cause, "org.apache.spark.SparkThrowable"):
                state = cause.getSqlState()
                if state:
                    parameters = dict(cause.getMessageParameters() or {})
                    cast = _cast_error(str(cause.getCondition()), parameters)
                    return cast or SqlError(_first_line(str(cause.getMessage())), str(state))
            cause = cause.getCause()
        return SqlError(_first_line(str(e.java_exception.getMessage() or e)), "XX000")
    message = e.getMessage() if isinstance(e, PySparkException) else None
    return SqlError(_first_line(message or str(e)), "XX000")


#: Spark's name of each integer type (its errors' ``targetType``), PostgreSQL's, and its bits.
_SPARK_INTEGERS = {
    '"SMALLINT"': ("smallint", 16),
    '"INT"': ("integer", 32),
    '"BIGINT"': ("bigint", 64),
}


def _cast_error(condition: str | None, parameters: dict[str, str]) -> SqlError | None:
    """PostgreSQL's error for a string Spark failed to cast to an integer type (its
    ``CAST_INVALID_INPUT``, 22018 for any text): 22P02 for text that is no integer, 22003
    for one past the type's range, as PostgreSQL 15 reads integer input
    (:func:`~timeshard.server.sql_tokens.integer_input_error`); None for any other error.
    Spark names the value as a SQL string literal (``'abc'``, a quote escaped ``\\'``)."""
    named = _SPARK_INTEGERS.get(parameters.get("targetType", ""))
    value = parameters.get("expression", "")
    if (
        condition != "CAST_INVALID_INPUT"
        or named is None
        or parameters.get("sourceType") != '"STRING"'
        or len(value) < 2
        or not (value.startswith("'") and value.endswith("'"))
    ):
        return None
    text = value[1:-1].replace("\\'", "'").replace("\\\\", "\\")
    return integer_input_error(text, *named)


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0] if lines else message


def check_no_error(shard: str, parts: list[Any], snap: Any, as_of: int) -> None:
    """SqlError XX000 if ``shard``'s snapshot ``snap`` at ``as_of``, of ``parts``, holds an
    err row: a query over it answers the error, never the ok rows alone (serve's SELECT
    and ``timeshard query``'s local path alike).

    Reads nothing (no Spark job) when every part of the snapshot recorded no
    err row; else one job, which names the least error.
    """
    from pyspark.sql import functions as F

    if not any(p.may_hold_errors for p in parts):
        return
    (error,) = snap.where("_err IS NOT NULL").agg(F.min("_err")).first()
    if error is not None:
        raise SqlError(f"{shard!r} holds an error at {as_of}: {error}", "XX000")


def _months_of_intervals(df: Any) -> Any:
    """``df`` with each year-month interval in it its whole months (an INT), at the top of
    a column or inside an array, map or struct, every name and place kept: PySpark cannot
    collect a year-month interval (its ``fromInternal`` is not implemented), and the
    column is described as PostgreSQL's interval, or an array or record of them
    (:func:`~timeshard.server.pgtypes.encode_value` writes the months). A year interval is
    cast to year-month first (cast to INT, it would be years). Runs on the driver, only
    to plan."""
    from pyspark.sql.types import IntegerType, YearMonthIntervalType

    def months(column: Any, data_type: Any) -> Any:
        year_months = _replaced(data_type, YearMonthIntervalType, YearMonthIntervalType(0, 1))
        return column.cast(year_months).cast(
            _replaced(data_type, YearMonthIntervalType, IntegerType())
        )

    return _converted(df, YearMonthIntervalType, months)


def _calendar_intervals_as_text(df: Any) -> Any:
    """``df`` with each of Spark's calendar intervals in it (``make_interval``, months with
    days or time) its text (``1 months 2 days 3 hours``), at the top of a column or inside
    an array, map or struct, every name and place kept: PySpark cannot collect a calendar
    interval (its ``fromInternal`` is not implemented). The column is described as
    PostgreSQL's interval, or an array or record of them (its type name ``interval``), and
    :func:`~timeshard.server.pgtypes.encode_value` writes the text as PostgreSQL's. Runs on
    the driver, only to plan."""
    from pyspark.sql.types import CalendarIntervalType, StringType

    def text(column: Any, data_type: Any) -> Any:
        return column.cast(_replaced(data_type, CalendarIntervalType, StringType()))

    return _converted(df, CalendarIntervalType, text)


def _converted(df: Any, kind: type, convert: Callable[[Any, Any], Any]) -> Any:
    """``df`` with each column whose type holds a ``kind`` (:func:`_holds`) ``convert``-ed
    (given the column and its type), every name and place kept; ``df`` itself if none
    does."""
    from pyspark.sql import functions as F

    fields = df.schema.fields
    if not any(_holds(f.dataType, kind) for f in fields):
        return df
    names = [f"_{i}" for i in range(len(fields))]  # the columns' own names may repeat
    return df.toDF(*names).select(
        *[
            (convert(F.col(n), f.dataType) if _holds(f.dataType, kind) else F.col(n)).alias(f.name)
            for n, f in zip(names, fields, strict=True)
        ]
    )


def _typed_as(df: Any, session: Any, spark_sql: str) -> Any:
    """``df`` with each column whose PostgreSQL type differs from the same column of the
    query ``spark_sql`` (planned, not run, in ``session``, over the same relations) cast
    to that column's Spark type: a prepared statement's rows are sent as its Describe
    described them. A ``spark_sql`` that does not plan, has other columns, or a type
    ``df``'s column does not cast to, leaves ``df`` as it is. Runs on the driver, only
    to plan."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    from timeshard.server.pgtypes import type_oid

    try:
        typed = session.sql(spark_sql).schema.fields
    except PySparkException:
        return df
    fields = df.schema.fields
    if len(typed) != len(fields):
        return df
    differ = [
        type_oid(column_type(f.dataType)) != type_oid(column_type(t.dataType))
        for f, t in zip(fields, typed, strict=True)
    ]
    if not any(differ):
        return df
    names = [f"_{i}" for i in range(len(fields))]  # the columns' own names may repeat
    try:
        return df.toDF(*names).select(
            *[
                (F.col(n).cast(t.dataType) if d else F.col(n)).alias(f.name)
                for n, f, t, d in zip(names, fields, typed, differ, strict=True)
            ]
        )
    except PySparkException:
        return df


def _holds(data_type: Any, kind: type) -> bool:
    """Whether ``data_type`` is a ``kind`` (a Spark type's class) or holds one."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, ArrayType):
        return _holds(data_type.elementType, kind)
    if isinstance(data_type, MapType):
        return _holds(data_type.keyType, kind) or _holds(data_type.valueType, kind)
    if isinstance(data_type, StructType):
        return any(_holds(f.dataType, kind) for f in data_type.fields)
    return isinstance(data_type, kind)


def _replaced(data_type: Any, kind: type, leaf: Any) -> Any:
    """``data_type`` with each ``kind`` (a Spark type's class) in it replaced by ``leaf``,
    the names of its struct fields and its nullability kept."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, kind):
        return leaf
    if isinstance(data_type, ArrayType):
        return ArrayType(_replaced(data_type.elementType, kind, leaf), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(
            _replaced(data_type.keyType, kind, leaf),
            _replaced(data_type.valueType, kind, leaf),
            data_type.valueContainsNull,
        )
    if isinstance(data_type, StructType):
        return StructType(
            [StructField(f.name, _replaced(f.dataType, kind, leaf), f.nullable) for f in data_type]
        )
    return data_type


def _subscribe_rows(
    reader: Any, names: list[str], as_of: int | None, up_to: int | None
) -> Generator[tuple[Any, ...], None, None]:
    """The rows of a SUBSCRIBE: the snapshot at its time, then the updates after it.

    ``UP TO`` is exclusive, as Materialize's: the updates at times ``< up_to``,
    and it ends once the frontier reaches ``up_to`` (every time before it is
    then known). An ``UP TO`` at or before the ``AS OF`` answers no row and ends
    at once, without waiting for the ``AS OF`` to be readable.
    """
    try:
        if as_of is not None and up_to is not None and up_to <= as_of:
            return
        while (at := _subscribe_time(reader, as_of)) is None:
            time.sleep(0.05)
            yield ()  # a heartbeat while nothing is readable: a cancel or a timeout ends it
        if up_to is not None and up_to <= at:
            return
        try:
            snapshot = reader.snapshot(at)
        except SinceError as e:  # a view's first write starts its history after ``at``
            raise SqlError(f"{reader.shard_id!r} is not readable at {at}: {e}", "22023") from None
        yield from _rows(snapshot, names, up_to)
        listen = reader.listen(at)
        try:
            # The listen holds its own lease and downgrades it as it goes: the reader
            # held the since at ``at`` for as long as the SUBSCRIBE ran.
            reader.expire()
            while True:
                for event in listen.next(timeout_s=0.5):
                    if isinstance(event, Updates):
                        yield from _rows(event.table, names, up_to)
                    elif isinstance(event, Progress) and event.frontier.is_empty():
                        # Only DROP closes a shard: no update comes again, as Materialize
                        # ends a SUBSCRIBE whose relation is dropped.
                        raise SqlError(
                            "subscribe has been terminated because underlying relation "
                            f"{reader.shard_id!r} was dropped",
                            "42P01",
                        )
                    elif (
                        isinstance(event, Progress)
                        and up_to is not None
                        and not event.frontier.less_than(up_to)
                    ):
                        return
                yield ()  # a heartbeat: lets the caller notice a cancel between updates
        finally:
            listen.expire()
    finally:
        reader.expire()


def _subscribe_time(reader: Any, as_of: int | None) -> int | None:
    """The time a SUBSCRIBE reads its snapshot at once ``reader`` can: ``as_of``, or
    without one the latest readable time; None while there is none yet (a view just
    created has written nothing, and its first write may start its history later)."""
    if as_of is not None:
        return None if reader.fetch_recent_upper().less_equal(as_of) else as_of
    try:
        return common_as_of({reader.shard_id: reader}, None)
    except InvalidUsage:
        return None


def _rows(table: pa.Table, names: list[str], up_to: int | None) -> Iterator[tuple[Any, ...]]:
    # Within one time the order is fixed (diff, then the row's values), so a
    # bounded SUBSCRIBE prints the same lines whatever order the parts came in.
    rows = sorted(
        table.to_pylist(),
        key=lambda r: (r["_ts"], r["_diff"], tuple((r[n] is None, r[n]) for n in names)),
    )
    for row in rows:
        if up_to is not None and row["_ts"] >= up_to:
            continue
        if row.get("_err") is not None:
            raise SqlError(f"the collection holds an error at {row['_ts']}: {row['_err']}", "XX000")
        yield (row["_ts"], row["_diff"], *(row[n] for n in names))


__all__ = ["QueryRows", "check_no_error", "spark_error"]
