"""The Maven packages of ``timeshard serve``'s SparkSession: asked for, recorded, lacking.

Spark loads a package's jars only when its SparkContext starts, and a server
keeps one SparkContext for its whole life, so its packages are settled
before Spark starts (on the driver, without Spark):

* the ones ``--packages`` names, by short name (:data:`PACKAGES`): ``kafka``
  (Spark's Kafka connector) and ``avro`` (spark-avro);
* the ones the CREATE SOURCE statements the location's catalog records
  need (:func:`recorded`), so that a server restarted on a location with a
  KAFKA source restores it without being told.

Without either, the session loads none: the server starts with no network
access, as pip alone installs it. A CREATE SOURCE that needs a package the
running session lacks (:func:`lacking`) is refused, naming the
``--packages`` to restart with. Which packages a source needs is
:func:`timeshard.spec.spark_packages`'s answer for its run-file form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient
from timeshard.server.statements import CreateSource, parse
from timeshard.spark.session import spark_avro_package, spark_kafka_package

#: A package's short name (``--packages``) to its Maven coordinate.
PACKAGES: dict[str, Callable[[], str]] = {"kafka": spark_kafka_package, "avro": spark_avro_package}


def named(names: str | None) -> list[str]:
    """The short names of ``--packages`` (comma-separated); InvalidUsage for an unknown one."""
    out = [n.strip().lower() for n in (names or "").split(",") if n.strip()]
    unknown = [n for n in out if n not in PACKAGES]
    if unknown:
        raise InvalidUsage(f"--packages takes {', '.join(PACKAGES)}, got {', '.join(unknown)}")
    return list(dict.fromkeys(out))


def needed(source: CreateSource) -> list[str]:
    """The short names of the packages ``source`` needs."""
    from timeshard.spec import RunSpec, SourceSpec, spark_packages

    # Not validated: only the kind and the formats matter here, and the engine
    # reports a statement that does not hold up when it creates the source.
    spec = SourceSpec.model_construct(name=source.name, kind=source.kind, options=source.options)
    coordinates = spark_packages(RunSpec.model_construct(source=[spec]))
    return [n for n, coordinate in PACKAGES.items() if coordinate() in coordinates]


def recorded(client: PersistClient) -> list[str]:
    """The short names of the packages the catalog's CREATE SOURCE statements need."""
    from timeshard.catalog import read_catalog

    out: list[str] = []
    for entry in read_catalog(client):
        if entry.kind != "statement":
            continue
        try:
            statement = parse(str(entry.definition.get("sql", "")))
        except InvalidUsage:  # the engine reports it when it restores the entry
            continue
        if isinstance(statement, CreateSource):
            out += [n for n in needed(statement) if n not in out]
    return out


def session_packages(client: PersistClient, names: str | None) -> list[str]:
    """The coordinates the server's session loads: ``--packages``, then the recorded ones."""
    wanted = named(names)
    wanted += [n for n in recorded(client) if n not in wanted]
    return [PACKAGES[n]() for n in wanted]


def lacking(spark: Any, source: CreateSource) -> list[str]:
    """The short names of the packages ``source`` needs that ``spark``'s context did not load."""
    from timeshard.spark.jars import loaded_packages

    loaded = loaded_packages(spark.sparkContext)
    return [n for n in needed(source) if PACKAGES[n]() not in loaded]


__all__ = ["PACKAGES", "lacking", "named", "needed", "recorded", "session_packages"]
