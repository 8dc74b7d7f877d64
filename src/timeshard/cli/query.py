"""``timeshard query``: Spark SQL over the shards it names, every one read AS OF one time.

Which shards the query reads, and when, is settled before any engine starts:
:func:`shards_named_in` finds the location's shards the SQL text names (a
column or alias spelled as a shard's id names that shard too),
:func:`refuse_names_alike` refuses two that differ only in case (Spark SQL
would not tell their temp views apart), a leased reader of each holds its
since, and the time is ``--as-of`` or else the latest time all of them are
readable at (:func:`~timeshard.persist.as_of.common_as_of`); a time some of
them cannot be read at is an error naming their readable times.

The query then runs in one of two places:

- on the ``timeshard serve`` that announced itself on the (embedded)
  location, if one runs (:func:`_run_on_server`): sqlglot translates the SQL
  from Spark's dialect to PostgreSQL's, and it is sent over pgwire, with
  ``AS OF`` if it names a shard (the time above); no Spark starts here;
- else in a local Spark session (:func:`_run_sql`): each shard is a temp view
  of its snapshot at the time, each row repeated by its multiplicity. A
  shard whose snapshot holds an err row fails the query with the least
  error, as ``timeshard serve`` answers it.

Runs on the driver: the names, the time, the leases, the pgwire client. On
the local path, reading the shards' parts, the err row check and the query
are Spark jobs on the executors, and at most ``--limit`` rows are collected.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from timeshard.cli.options import (
    DEFAULT_LOCATION,
    BlobOpt,
    ConsensusOpt,
    JsonOpt,
    LocationOpt,
    Times,
    TimesOpt,
    check_limit,
    console,
    err_console,
    fit,
    location_from,
    print_json,
    time_text,
)
from timeshard.cli.serve import PASSWORD_ENV
from timeshard.errors import InvalidUsage, SinceError
from timeshard.persist import PersistClient, ReadHandle
from timeshard.persist.as_of import common_as_of, not_readable
from timeshard.server.discovery import running_server


def query(
    sql: Annotated[
        str, typer.Argument(help="Spark SQL over shards (use `backticks` for ids with dots).")
    ],
    as_of: Annotated[
        int | None,
        typer.Option(
            "--as-of",
            help="Time to read every shard at (default: the latest time all named shards "
            "are readable at).",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(help="Rows to print at most.")] = 50,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
    times: TimesOpt = Times.utc,
) -> None:
    """Run Spark SQL over the shards it names, every one read AS OF one time.

    A shard is named by its id in the SQL text, bare or in backticks. Which
    shards are named, and the time to read them at, are settled before Spark
    starts: a time some named shard cannot be read at is an error naming
    every such shard's readable times. When `timeshard serve` runs on the
    location, the query runs there (translated to PostgreSQL's dialect) and
    no Spark starts here; a server with a password is given the one in
    TIMESHARD_SERVE_PASSWORD (else PGPASSWORD or ~/.pgpass, as libpq reads them).
    """
    from timeshard.spark import spark_session

    check_limit(limit)
    client = PersistClient(location_from(location, blob, consensus))
    known = client.list_shards()
    named = shards_named_in(sql, known)
    refuse_names_alike(named)
    readers = {s: client.open_leased_reader(s) for s in named}
    server = running_server(location) if blob is None and consensus is None else None
    try:
        as_of = common_as_of(readers, as_of)
        if server is not None:
            rows = _run_on_server(server, sql, as_of, limit)
            err_console.print(f"(ran on timeshard serve at {server[0]}:{server[1]})")
        else:
            spark = spark_session(app_name="timeshard-query", blob_uri=client.location.blob_uri)
            rows = _run_sql(spark, readers, sql, as_of, limit, known)
    finally:
        for handle in readers.values():
            handle.expire()
    if as_json:
        print_json({"as_of": as_of, "rows": rows})
        return
    title = f"AS OF {time_text(as_of, times)}"
    table = Table(*(escape(c) for c in (rows[0] if rows else ["(no rows)"])), title=title)
    for row in rows:
        table.add_row(*(escape(str(v)) for v in row.values()))
    console.print(fit(table))


_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NAME = re.compile(r"`((?:[^`]|``)+)`|(\w+(?:\.\w+)*)")


def shards_named_in(sql: str, known: Iterable[str]) -> list[str]:
    """The shards of ``known`` that ``sql`` names, in the order of ``known``.

    A name is a backticked identifier or a bare (dotted) one outside string
    literals, or a dot-separated piece of one. A column or alias that happens
    to share a shard's id names that shard too: the query then reads it as
    well, and needs it readable.
    """
    names: set[str] = set()
    for quoted, bare in _NAME.findall(_STRING_LITERAL.sub(" ", sql)):
        name = quoted.replace("``", "`") if quoted else bare
        names.add(name)
        names.update(name.split(".") if bare else ())
    return [s for s in known if s in names]


def refuse_names_alike(shards: list[str]) -> None:
    """InvalidUsage naming two of ``shards`` that differ only in case, if there are two.

    Each shard a query names is a temp view of that name, and Spark SQL does not
    tell names apart by case: the query would read one of the two shards for both.
    """
    seen: dict[str, str] = {}
    for shard in shards:
        other = seen.setdefault(shard.lower(), shard)
        if other != shard:
            raise InvalidUsage(
                f"the query names shards {other!r} and {shard!r}, which differ only in case: "
                "Spark SQL does not tell them apart, so one query cannot read both"
            )


def _run_on_server(
    server: tuple[str, int], sql: str, as_of: int | None, limit: int
) -> list[dict[str, Any]]:
    """Run Spark SQL ``sql`` AS OF ``as_of`` on a running ``timeshard serve``."""
    import psycopg
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        statement = sqlglot.transpile(sql, read="spark", write="postgres")[0]
    except SqlglotError as e:
        raise InvalidUsage(f"cannot read the query: {str(e).splitlines()[0]}") from e
    params: tuple[int, ...] = ()
    if as_of is not None:  # the query's own % are not placeholders
        statement, params = statement.replace("%", "%%") + " AS OF %s", (as_of,)
    host, port = server
    password = os.environ.get(PASSWORD_ENV) or None  # else libpq's: PGPASSWORD, ~/.pgpass
    try:
        conn = psycopg.connect(
            host=host,
            port=port,
            user="timeshard",
            dbname="timeshard",
            password=password,
            autocommit=True,
        )
    except psycopg.OperationalError as e:
        if e.sqlstate == "28P01" or "password" in str(e):
            given = password or os.environ.get("PGPASSWORD")
            refused = "refused the password given" if given else "needs a password"
            raise InvalidUsage(
                f"timeshard serve at {host}:{port} {refused}: "
                f"set {PASSWORD_ENV} to the server's password"
            ) from e
        raise InvalidUsage(f"timeshard serve at {host}:{port}: {str(e).strip()}") from e
    try:
        with conn, conn.cursor() as cur:
            cur.execute(statement.encode(), params or None)
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchmany(limit)]
    except psycopg.Error as e:
        detail = e.diag.message_primary or str(e)
        raise InvalidUsage(f"timeshard serve at {host}:{port}: {detail}") from e


def _run_sql(
    spark: Any,
    readers: dict[str, ReadHandle],
    sql: str,
    as_of: int | None,
    limit: int,
    known: list[str],
) -> list[dict[str, Any]]:
    """Register each shard as a temp view of its snapshot at ``as_of``; run ``sql``.

    A shard whose snapshot holds an err row fails the query, naming the least
    error, as ``timeshard serve`` answers it. An error Spark raises for the
    query (syntax, an unknown table or column, a failing cast) is an
    InvalidUsage holding the first line of its message.
    """
    from pyspark.errors import PySparkException
    from pyspark.logger import PySparkLogger

    from timeshard.server.engine import check_no_error
    from timeshard.spark.snapshot import parts_snapshot_df

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True  # the error is printed once, below
    for shard, reader in readers.items():
        assert as_of is not None, readers
        try:
            parts = reader.snapshot_parts(as_of)
        except SinceError as e:
            raise not_readable(reader, as_of) from e
        snap = parts_snapshot_df(spark, reader, parts, as_of)
        check_no_error(shard, parts, snap, as_of)
        data = [c for c in snap.columns if c not in ("_ts", "_diff", "_err")]
        quoted = [f"`{c}`" for c in data]
        snap.selectExpr(*quoted, "explode(sequence(1, CAST(_diff AS INT))) AS _n").drop(
            "_n"
        ).createOrReplaceTempView(f"`{shard}`")
    try:
        return [r.asDict() for r in spark.sql(sql).limit(limit).collect()]
    except PySparkException as e:
        message = (e.getMessage() or str(e)).strip().splitlines()[0]
        if e.getCondition() == "TABLE_OR_VIEW_NOT_FOUND":
            message += f" The location's shards: {', '.join(known)} (ids with dots in backticks)."
        raise InvalidUsage(message) from e


__all__ = ["query", "refuse_names_alike", "shards_named_in"]
