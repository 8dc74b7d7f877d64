"""One step of an ingestion, and the rows it wrote: what the source round-trip tests read."""

from __future__ import annotations

import itertools
from typing import Any

from pyspark.sql import SparkSession

from timeshard.persist import PersistClient
from timeshard.storage.ingest import Ingestion


def rows_after_one_step(
    spark: SparkSession, client: PersistClient, source: Any, *, first_time: int = 1, **options: Any
) -> list[dict[str, Any]]:
    """The rows (ok and err, with ``_ts`` and ``_diff``) of ``source``'s shard after one step
    of an :class:`Ingestion` of it (``options``: its envelope, key columns), read at the
    shard's upper less one; the clock counts from ``first_time``."""
    clock = itertools.count(first_time)
    ing = Ingestion(spark, client, source, clock=lambda: next(clock), **options)
    try:
        ing.step()
        upper = client.state(source.name).upper.time
        assert upper is not None
        reader = client.open_leased_reader(source.name)
        try:
            return reader.snapshot(upper - 1).to_pylist()
        finally:
            reader.expire()
    finally:
        ing.close()
