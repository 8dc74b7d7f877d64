"""``timeshard verify``: check a location against its invariants and from-scratch recomputations.

The checks and the report are :mod:`timeshard.verify`'s. The location is a
directory given as the argument (default ``.timeshard``) or ``--blob`` and
``--consensus``, not both. Besides each object's first and last change time,
``--samples`` others are checked, drawn with ``--seed`` (random unless given,
and printed, so a run can be repeated). The exit code is 0 if all is well, 1
with a report (a table, or ``--json``) if not.

Runs on the driver, with pyarrow, for the shards' checks; a Spark session
(with the packages the location's sources need) starts only when the catalog
holds objects to recompute, and their recomputations are Spark jobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from timeshard.cli.options import (
    DEFAULT_LOCATION,
    BlobOpt,
    ConsensusOpt,
    JsonOpt,
    console,
    location_from,
    print_json,
)
from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient


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


__all__ = ["verify"]
