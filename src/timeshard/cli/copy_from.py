"""``timeshard copy``: COPY FROM, CSV, JSON or Parquet files loaded into a collection at one time.

The command line of :mod:`timeshard.storage.copy_from`. ``plan_copy`` checks
everything on the driver before Spark starts (the arguments, the files, the
collection's schema; a mistake is an error and writes nothing); ``run_copy``
then reads and decodes the files in Spark tasks, each writing one part, and
the driver appends the parts as one batch, atomically, at one time (the
collection's upper, or ``--at``). A bad row fails the whole COPY, naming its
``file:line``, unless ``--on-error err-rows`` loads it as an err row. Prints
one line: the rows written and their time (or ``--json``).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from rich.markup import escape

from timeshard.cli.options import (
    DEFAULT_LOCATION,
    BlobOpt,
    ConsensusOpt,
    JsonOpt,
    LocationOpt,
    console,
    location_from,
    print_json,
)
from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient


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


__all__ = ["copy"]
