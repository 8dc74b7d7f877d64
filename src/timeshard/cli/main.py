"""``timeshard``: inspect and read shards, explain views, and run the demo.

The commands live by concept: ``status`` in :mod:`timeshard.cli.status`,
``explain`` in :mod:`timeshard.cli.explain`, the options they all share in
:mod:`timeshard.cli.options`; shard admin, SQL, subscribe, verify, run,
copy, nemesis and demo here.

A location is named either by ``--location DIR`` (the embedded default: a
blob directory ``DIR/blob`` and SQLite consensus ``DIR/consensus.sqlite``) or
by ``--blob URI --consensus URI`` (for example ``file:///shared/blob`` and
``postgresql://user@host/db``). Tables are rendered with rich; ``--json``
prints machine-readable output instead.

Every command but ``demo``, ``run``, ``nemesis`` and ``serve`` without
``--read-only`` reads an existing location: a ``--location`` directory that
does not exist, or holds no ``consensus.sqlite``, is an error (nothing is
created). The default location, ``.timeshard``, is the one ``demo`` and
``run`` write.

Errors. A timeshard error (a bad argument, an unknown or invalid shard id, a
time a shard cannot be read at, a query Spark rejects, a state that does not
decode, a damaged part) is printed on stderr as one line ``error: <message>``
and the exit code is 2; no traceback. ``status`` and ``shard list`` report a
shard whose state cannot be read in its row (the ``error`` field) and go on
with the others; they then exit with code 1.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from timeshard.cli.dev import dev_app
from timeshard.cli.explain import explain
from timeshard.cli.options import (
    DEFAULT_LOCATION,
    TIME_COLUMNS,
    BlobOpt,
    ConsensusOpt,
    JsonOpt,
    LocationOpt,
    Times,
    TimesOpt,
    cell,
    console,
    err_console,
    fit,
    location_from,
    print_errors,
    print_json,
    time_cell,
    time_text,
)
from timeshard.cli.serve import PASSWORD_ENV, serve
from timeshard.cli.status import status
from timeshard.errors import InvalidUsage, SinceError, TimeshardError
from timeshard.persist import PersistClient, ReadHandle
from timeshard.persist.as_of import common_as_of, not_readable
from timeshard.server.discovery import running_server
from timeshard.spec import DEFAULT_DIR, RunSpec
from timeshard.status import shard_states

app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False)
shard_app = typer.Typer(help="Inspect and read shards.", no_args_is_help=True)
app.add_typer(shard_app, name="shard")
app.add_typer(dev_app, name="dev")
app.command("status")(status)
app.command("explain")(explain)
app.command("serve")(serve)


@shard_app.command("list")
def shard_list(
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
    times: TimesOpt = Times.utc,
) -> None:
    """List the shards of a location with their frontiers and sizes.

    A shard whose state cannot be read is listed with its ``error``; the exit
    code is then 1.
    """
    client = PersistClient(location_from(location, blob, consensus))
    rows: list[dict[str, Any]] = []
    for shard_id, s in shard_states(client).items():
        if isinstance(s, TimeshardError):
            rows.append({"shard": shard_id, "error": str(s)})
            continue
        rows.append(
            {
                "shard": shard_id,
                "since": s.since.to_json(),
                "upper": s.upper.to_json(),
                "batches": len(s.batches),
                "rows": s.num_rows(),
                "bytes": s.size_in_bytes(),
                "seqno": s.seqno,
                "error": None,
            }
        )
    failed = any(r["error"] for r in rows)
    if as_json:
        print_json(rows)
    else:
        table = Table("shard", "since", "upper", "batches", "rows", "bytes", "seqno")
        for r in rows:
            if r["error"]:
                table.add_row(escape(r["shard"]), "unreadable (below)")
                continue
            table.add_row(
                escape(r["shard"]),
                time_cell(r["since"], times, none="empty"),
                time_cell(r["upper"], times, none="closed"),
                *(cell(r[c]) for c in ("batches", "rows", "bytes", "seqno")),
            )
        console.print(fit(table, ("seqno", "bytes", "batches", "since"), whole=TIME_COLUMNS))
        print_errors({r["shard"]: r["error"] for r in rows if r["error"]})
    if failed:
        raise typer.Exit(1)


@shard_app.command("inspect")
def shard_inspect(
    shard: str,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
    times: TimesOpt = Times.utc,
) -> None:
    """Show a shard's state: schema, frontiers, batches, readers and writers."""
    state = PersistClient(location_from(location, blob, consensus)).state(shard)
    if as_json:
        doc = state.to_json()
        doc["schema"] = str(state.data_schema)
        print_json(doc)
        return
    console.print(
        f"[bold]{escape(shard)}[/bold] seqno {state.seqno}  "
        f"since {time_text(state.since.time, times, none='empty')}  "
        f"upper {time_text(state.upper.time, times, none='closed')}",
        soft_wrap=True,
    )
    console.print(escape(f"schema: {', '.join(f'{f.name} {f.type}' for f in state.data_schema)}"))
    batches = Table("lower", "upper", "since", "parts", "rows", "bytes", title="batches")
    for b in state.batches:
        batches.add_row(
            time_cell(b.desc.lower.time, times, none="empty"),
            time_cell(b.desc.upper.time, times, none="closed"),
            time_cell(b.desc.since.time, times, none="empty"),
            str(len(b.parts)),
            str(b.num_rows),
            str(b.size_in_bytes),
        )
    console.print(fit(batches, ("bytes", "parts"), whole=TIME_COLUMNS))
    holders = Table("kind", "id", "since / lease", title="readers and writers")
    for rid, r in state.leased_readers.items():
        since = time_text(r.since.time, times, none="empty")
        holders.add_row("leased reader", rid, f"since {since}, seqno {r.seqno}")
    for rid, c in state.critical_readers.items():
        since = time_text(c.since.time, times, none="empty")
        holders.add_row(
            "critical reader", escape(rid), escape(f"since {since}, opaque {c.opaque!r}")
        )
    for wid, w in state.writers.items():
        holders.add_row("writer", wid, f"lease {w.lease_duration_ms} ms")
    console.print(fit(holders))


@shard_app.command("snapshot")
def shard_snapshot(
    shard: str,
    as_of: Annotated[
        int | None, typer.Option("--as-of", help="Time to read at (default: the latest readable).")
    ] = None,
    limit: Annotated[int, typer.Option(help="Rows to print at most.")] = 50,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
    times: TimesOpt = Times.utc,
) -> None:
    """Print a shard's contents at a time (pyarrow path, no Spark); by default a closed
    shard (a dropped view's) at its last time, where it has all its updates."""
    check_limit(limit)
    client = PersistClient(location_from(location, blob, consensus))
    reader = client.open_leased_reader(shard)
    try:
        upper = reader.fetch_recent_upper()
        if as_of is None and upper.is_empty():  # closed: at its last time
            as_of = common_as_of({shard: reader}, None)
        if as_of is None:
            as_of = (upper.time - 1) if upper.time else 0
        if upper.less_equal(as_of):
            raise not_readable(reader, as_of)
        try:
            rows = reader.snapshot(as_of).to_pylist()
        except SinceError as e:
            raise not_readable(reader, as_of) from e
    finally:
        reader.expire()
    if as_json:
        print_json({"shard": shard, "as_of": as_of, "rows": rows[:limit], "total_rows": len(rows)})
        return
    if not rows:
        console.print(f"{escape(shard)} is empty at {time_text(as_of, times)}")
        return
    title = f"{shard} AS OF {time_text(as_of, times)} ({len(rows)} rows)"
    table = Table(*(escape(c) for c in rows[0]), title=escape(title))
    for r in rows[:limit]:
        table.add_row(*(escape(str(v)) for v in r.values()))
    console.print(fit(table))


def check_limit(limit: int) -> None:
    """InvalidUsage naming ``limit`` unless it is a number of rows to print (1 or more)."""
    if limit < 1:
        raise InvalidUsage(f"--limit must be at least 1, got {limit}")


@shard_app.command("compact")
def shard_compact(
    shard: str,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
) -> None:
    """Run compaction of a shard to completion."""
    merges = PersistClient(location_from(location, blob, consensus)).compact(shard)
    console.print(f"{shard}: {merges} merges applied")


@shard_app.command("gc")
def shard_gc(
    shard: str,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Expire stale leases, delete unreferenced blobs and truncate consensus."""
    report = PersistClient(location_from(location, blob, consensus)).gc(shard)
    doc = {
        "deleted_blobs": report.deleted_blobs,
        "kept_blobs": report.kept_blobs,
        "truncated_versions": report.truncated_versions,
        "expired": list(report.expired),
        "unrecognized_keys": list(report.unrecognized_keys),
    }
    if as_json:
        print_json(doc)
    else:
        console.print(doc)


@app.command("query")
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


def check_seconds(seconds: float) -> None:
    """InvalidUsage naming ``seconds`` unless it is a finite duration of 0 s or more."""
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidUsage(f"--seconds must be a finite number, 0 or more, got {seconds}")


@app.command("copy")
def copy(
    path: Annotated[
        str, typer.Argument(help="A file, a directory or a glob; a local path or a URI.")
    ],
    into: Annotated[
        str, typer.Option("--into", help="The collection to load into (an existing shard).")
    ],
    fmt: Annotated[str, typer.Option("--format", help="csv, json or parquet.")],
    on_error: Annotated[
        str,
        typer.Option(
            "--on-error",
            help="fail: a bad row fails the COPY, nothing is written; err-rows: bad rows "
            "are loaded as err rows.",
        ),
    ] = "fail",
    header: Annotated[
        bool | None,
        typer.Option(
            "--header/--no-header",
            help="CSV: line 1 of each file names the columns (the default).",
            show_default=False,
        ),
    ] = None,
    not_null: Annotated[
        list[str] | None,
        typer.Option("--not-null", help="A column no row may leave null (repeatable)."),
    ] = None,
    at: Annotated[
        int | None,
        typer.Option("--at", help="The time to write at (default: the collection's upper)."),
    ] = None,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """COPY FROM: load CSV, JSON or Parquet files into a collection at one time, atomically.

    Everything is checked before Spark starts; a bad row fails the whole COPY
    (naming file:line) unless --on-error err-rows. Prints one line: the rows
    written and their time (see timeshard.storage.copy_from).
    """
    from timeshard.spark import spark_session
    from timeshard.storage.copy_from import plan_copy, run_copy

    modes = {"fail": "fail", "err-rows": "err_rows"}
    if on_error not in modes:
        raise InvalidUsage(f"--on-error must be one of {list(modes)}, got {on_error!r}")
    client = PersistClient(location_from(location, blob, consensus))
    plan = plan_copy(
        client,
        path,
        into,
        format=fmt,
        header=header,
        on_error=modes[on_error],
        not_null=not_null or (),
        at=at,
    )
    spark = spark_session(app_name="timeshard-copy", blob_uri=client.location.blob_uri)
    report = run_copy(spark, client, plan)
    if as_json:
        print_json(dataclasses.asdict(report))
    else:
        console.print(escape(report.line()), soft_wrap=True)


@app.command("subscribe")
def subscribe(
    obj: Annotated[str, typer.Argument(help="The shard or view to follow.")],
    from_: Annotated[
        int | None, typer.Option("--from", help="Start time (default: the latest readable).")
    ] = None,
    seconds: Annotated[float, typer.Option(help="Stop after this long.")] = 30.0,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
) -> None:
    """Print the snapshot at --from, then every update as it becomes definite (JSON lines).

    A shard not yet written up to --from (an empty one, say) is waited for,
    up to --seconds. A closed shard (a dropped view's) starts by default at its
    last time, where it has all its updates.
    """
    from timeshard.persist import Progress, Updates

    check_seconds(seconds)
    deadline = time.monotonic() + seconds
    reader = PersistClient(location_from(location, blob, consensus)).open_leased_reader(obj)
    try:
        upper = reader.fetch_recent_upper()
        if from_ is None and upper.is_empty():  # closed: at its last time, as a snapshot
            from_ = common_as_of({obj: reader}, None)
        if from_ is None:
            from_ = (upper.time or 1) - 1
        if not reader.since.less_equal(from_):
            raise not_readable(reader, from_)
        if not _wait_for_upper_past(reader, from_, deadline):
            return
        try:
            rows = reader.snapshot(from_).to_pylist()
            listen = reader.listen(from_)
        except SinceError as e:
            raise not_readable(reader, from_) from e
        for r in rows:
            sys.stdout.write(json.dumps(r, default=str) + "\n")
        while time.monotonic() < deadline:
            for event in listen.next(timeout_s=min(1.0, max(deadline - time.monotonic(), 0))):
                if isinstance(event, Updates):
                    for r in event.table.to_pylist():
                        sys.stdout.write(json.dumps(r, default=str) + "\n")
                elif isinstance(event, Progress):
                    sys.stdout.write(json.dumps({"progress": event.frontier.to_json()}) + "\n")
            sys.stdout.flush()
        listen.expire()
    finally:
        reader.expire()


def _wait_for_upper_past(reader: ReadHandle, t: int, deadline: float) -> bool:
    """Wait until ``reader``'s shard is written beyond ``t``; False if ``deadline`` passes."""
    delay = 0.01
    while reader.fetch_recent_upper().less_equal(t):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.25)
    return True


@app.command("verify")
def verify(
    location: Annotated[
        Path | None,
        typer.Argument(
            help="Embedded location directory (default .timeshard), or give --blob and "
            "--consensus instead.",
            show_default=False,
        ),
    ] = None,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    samples: Annotated[
        int, typer.Option(help="Change times sampled per object besides the first and last.")
    ] = 8,
    seed: Annotated[
        int | None, typer.Option(help="Seed of the sampling (default: random, then printed).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check every shard's invariants, and each cataloged view and FILE upsert against a
    from-scratch recomputation. Exit code 0 if all is well, 1 with a report if not."""
    from timeshard.verify import render_report, verify_location

    if location is not None and (blob is not None or consensus is not None):
        raise InvalidUsage(
            f"give a location directory ({str(location)!r}) or --blob/--consensus, not both"
        )
    client = PersistClient(location_from(location or DEFAULT_LOCATION, blob, consensus))
    blob_uri = client.location.blob_uri

    def verify_spark(packages: list[str]) -> Any:
        from timeshard.spark import spark_session

        return spark_session(app_name="timeshard-verify", packages=packages, blob_uri=blob_uri)

    report = verify_location(client, spark=verify_spark, samples=samples, seed=seed)
    if as_json:
        print_json(report.to_json())
    else:
        render_report(report, console)
    raise typer.Exit(0 if report.ok else 1)


@app.command("run")
def run(
    file: Annotated[Path, typer.Argument(help="A TOML file declaring sources and views.")],
    seconds: Annotated[float, typer.Option(help="How long to run.")] = 30.0,
) -> None:
    """Run the sources and views a declaration file declares (see timeshard.spec).

    The file is checked in full (sources' options, views' inputs) before Spark
    starts, and a bad one writes nothing. A source whose server is unreachable is
    not a bad declaration: it is shown ``stalled``, the rest is checked and runs,
    and the run builds it (and checks what reads it) once its server answers.
    """
    from timeshard.catalog import read_catalog
    from timeshard.cli.serve import JVM_EXITED, jvm_gone
    from timeshard.controller import Pipeline, read_at_start
    from timeshard.spark import spark_session
    from timeshard.spec import check_spec, load_spec, spark_packages

    check_seconds(seconds)
    spec = load_spec(file)
    loc = spec.location
    directory = Path(loc.dir or DEFAULT_DIR)
    existing = _existing_client(directory, loc.blob, loc.consensus)
    shards, catalog = (
        read_at_start(
            lambda: (existing.list_shards(), read_catalog(existing)),
            "the location's shards and catalog",
        )
        if existing is not None
        else ([], [])
    )
    try:
        check_spec(spec, existing=shards, catalog=catalog)
    except InvalidUsage:
        raise
    except Exception:  # a source's server unreachable: the run retries it (its health says)
        unreachable = _unreachable_sources(spec)
        if not unreachable:
            raise
        for name, error in unreachable.items():
            err_console.print(f"stalled: {escape(name)}: {escape(error)}", soft_wrap=True)
        check_spec(_checkable(spec, set(unreachable), set(shards)), shards, catalog)
    client = PersistClient(location_from(directory, loc.blob, loc.consensus, create=True))
    spark = spark_session(
        master=spec.spark.master,
        app_name="timeshard-run",
        extra_conf=spec.spark.conf,
        packages=spark_packages(spec),
        blob_uri=client.location.blob_uri,
    )
    pipeline = None
    jvm = True
    ran = False
    try:  # a failure (a Ctrl-C too) closes what was built: its leases would linger
        pipeline = Pipeline(spark, client, spec)
        for held in pipeline.undeclared:  # its inputs compact no further until it is dropped
            err_console.print(f"undeclared: {escape(held.line())}", soft_wrap=True)
        for obj, error in pipeline.first_failures.items():  # retried on the next tick
            err_console.print(f"stalled: {escape(obj)}: {escape(error)}", soft_wrap=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if jvm_gone("run"):
                jvm = False
                raise typer.Exit(JVM_EXITED)
            tick = time.monotonic()
            failures = pipeline.step()
            try:  # a fault reading them is shown; the objects go on (their health says)
                uppers = ", ".join(f"{s}@{upper}" for s, upper in pipeline.uppers().items())
            except Exception as e:
                uppers = f"uppers unknown: {type(e).__name__}: {str(e)[:300]}"
            console.print(f"tick {time.monotonic() - tick:.2f} s: {escape(uppers)}")
            for obj, error in failures.items():  # retried on the next tick
                err_console.print(f"stalled: {escape(obj)}: {escape(error)}", soft_wrap=True)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        ran = True
    finally:
        if jvm:  # with the JVM gone, closing through it would fail or hang
            try:
                if pipeline is not None:
                    _close_after(pipeline, ran)
            finally:
                spark.stop()


def _unreachable_sources(spec: RunSpec) -> dict[str, str]:
    """The declared sources whose build faults now (their server unreachable), each with
    its fault; a refusal (InvalidUsage) is raised."""
    from timeshard.spec import build_source, checked_only

    out = {}
    for s in spec.source:
        try:
            build_source(checked_only(s))
        except InvalidUsage:
            raise
        except Exception as e:
            out[s.name] = f"{type(e).__name__}: {str(e)[:300]}"
    return out


def _checkable(spec: RunSpec, unreachable: set[str], existing: set[str]) -> RunSpec:
    """``spec`` without the ``unreachable`` sources, and without the views and exports that
    read a shard only they would write (one ``existing`` lacks), or such a view: what
    ``check_spec`` can check while they are unreachable (the run checks the rest when it
    builds them)."""
    late: set[str] = set()

    def waits(shard: str) -> bool:
        if shard in existing:
            return False
        return shard in late or any(shard == n or shard.startswith(f"{n}.") for n in unreachable)

    views = []
    for v in spec.view:
        if any(waits(shard) for shard in v.inputs.values()):
            late.add(v.name)
        else:
            views.append(v)
    return spec.model_copy(
        update={
            "source": [s for s in spec.source if s.name not in unreachable],
            "view": views,
            "export": [e for e in spec.export if not waits(e.input)],
        }
    )


def _close_after(pipeline: Any, ran: bool) -> None:
    """Close ``pipeline``; after a failed run, a failing close is printed, not raised (the
    run's own failure is the one to see)."""
    try:
        pipeline.close()
    except Exception as e:
        if ran:
            raise
        err_console.print(f"closing after the failure failed too: {escape(repr(e))}")


@app.command("drop")
def drop(
    name: Annotated[str, typer.Argument(help="The view or export to drop.")],
    cascade: Annotated[
        bool, typer.Option("--cascade", help="Drop the views and exports that hold it too.")
    ] = False,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop a view or an export that no running declaration declares any more.

    Its holds on its inputs go, so they compact again (``timeshard run`` names
    such objects on its ``undeclared:`` lines, and ``status`` shows them
    ``stalled``); a view's shard is closed, and its name is not used again. As
    ``DROP`` in ``timeshard serve``: an object others hold is refused unless
    ``--cascade``; an object ``timeshard serve`` created is dropped there; a
    view a process still runs or follows (a subscribe) is refused. Nothing is
    dropped if any is refused. A read-only deployment of the view (a standby
    not promoted) writes nothing, so it is not seen: it is fenced, as the
    view's shard is closed first, and can never be promoted over the view.
    """
    from timeshard.controller import drop_object

    client = PersistClient(location_from(location, blob, consensus))
    dropped = drop_object(client, name, cascade=cascade)
    if as_json:
        print_json([{"name": d.name, "kind": d.kind, "released": sorted(d.holds)} for d in dropped])
        return
    for d in dropped:
        released = ", ".join(map(repr, sorted(d.holds))) or "nothing"
        console.print(f"dropped {d.kind} {escape(repr(d.name))} (released {escape(released)})")


def _existing_client(
    directory: Path, blob: str | None, consensus: str | None
) -> PersistClient | None:
    """A client of the location, or None for an embedded one that does not exist (it is
    not created: a declaration that fails its checks writes nothing)."""
    if blob is None and consensus is None and not (directory / "consensus.sqlite").is_file():
        return None
    return PersistClient(location_from(directory, blob, consensus, create=True))


@app.command("nemesis")
def nemesis(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the runs live (a failed run's directory is kept).")
    ] = Path(".timeshard/nemesis"),
    seed: Annotated[
        int | None, typer.Option(help="Seed of the whole run (default: random, then printed).")
    ] = None,
    replicas: Annotated[int, typer.Option(help="Replica processes per run.")] = 3,
    runs: Annotated[int | None, typer.Option(help="Number of runs (default 1).")] = None,
    minutes: Annotated[
        float | None,
        typer.Option(help="Instead of --runs: start runs until this many minutes have passed."),
    ] = None,
    fault_seconds: Annotated[float, typer.Option(help="Length of each run's fault phase.")] = 60.0,
    consensus_kind: Annotated[
        str,
        typer.Option("--consensus", help="sqlite, postgres, or both (alternating by run)."),
    ] = "sqlite",
    kinds: Annotated[
        str, typer.Option(help="Comma-separated fault kinds to inject.")
    ] = "kill,pause,unreliable,pg_restart,disk_full,clock_jump",
) -> None:
    """Run a pipeline as replica processes under seeded faults, heal, and verify each run.
    Exit code 0 if every run recovered and verify found no difference."""
    import random

    from timeshard.nemesis import NemesisConfig, NemesisRunner
    from timeshard.nemesis.report import render_nemesis

    seed = random.randrange(1 << 31) if seed is None else seed
    config = NemesisConfig(
        directory=directory,
        seed=seed,
        replicas=replicas,
        runs=runs if runs is not None or minutes is not None else 1,
        minutes=minutes,
        fault_seconds=fault_seconds,
        consensus=consensus_kind,
        kinds=tuple(k.strip() for k in kinds.split(",") if k.strip()),
    )
    console.print(f"nemesis seed {seed} (repeat the run with --seed {seed})")
    report = NemesisRunner(config, log=lambda line: console.print(escape(line))).run()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "nemesis.json").write_text(json.dumps(report.to_json(), indent=1))
    render_nemesis(report, console)
    console.print(f"results: {directory / 'nemesis.json'}")
    raise typer.Exit(0 if report.ok else 1)


@app.command("demo")
def demo(
    location: LocationOpt = DEFAULT_LOCATION,
    seconds: Annotated[float, typer.Option(help="How long to run the sources.")] = 20.0,
) -> None:
    """AUCTION and KEY VALUE sources with two views, live, then a consistency check.

    The demo starts afresh: it deletes what an earlier demo left at the
    location, and refuses a location it did not create.
    """
    from timeshard.cli.demo import run_demo

    raise typer.Exit(run_demo(location, seconds, console))


def main() -> None:
    try:
        app()
    except TimeshardError as e:
        message = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        err_console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
        raise SystemExit(2) from e


__all__ = ["DEFAULT_LOCATION", "app", "main", "refuse_names_alike", "shards_named_in"]
