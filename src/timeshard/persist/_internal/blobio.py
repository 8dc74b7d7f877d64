"""Reading and writing parts in blob, with retries of storage failures.

Runs on the driver (and in compaction); Spark tasks write parts themselves
through ``timeshard.spark.parts``.

Invariants:

1. A part is written at a fresh key, so retrying a ``set`` whose outcome was
   indeterminate is safe. Retries that run out raise Determinate only if no
   attempt may have taken effect, else Indeterminate.
2. A missing or corrupt part raises :class:`PartError`; it is never skipped.
3. A part written here records its size and SHA-256 in its :class:`PartMeta`;
   a read checks both before decoding. It records its time bounds, and its
   distinct times when there are at most ``MAX_PART_TIMES``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from timeshard.errors import Determinate, ExternalError, Indeterminate, PartError
from timeshard.location.blob import Blob
from timeshard.persist._internal.parts import (
    TS,
    PartMeta,
    check_part_bytes,
    decode_part,
    distinct_times,
    encode_part,
    err_row_count,
    part_digest,
    ts_bounds,
)
from timeshard.persist.config import PersistConfig

R = TypeVar("R")


def retry_external(
    config: PersistConfig, what: str, call: Callable[[], R], *, reads: bool = False
) -> R:
    """Call ``call`` until it does not raise ExternalError, at most max_attempts times.

    Then it raises Indeterminate if any attempt did (that attempt may have taken
    effect: a value written, a key deleted), else Determinate. A call that only
    ``reads`` has no effect to be unsure of: its failure is Determinate.
    """
    rng = random.Random()
    failures = 0
    maybe_applied = False
    while True:
        try:
            return call()
        except ExternalError as e:
            failures += 1
            maybe_applied = maybe_applied or (isinstance(e, Indeterminate) and not reads)
            if failures >= config.max_attempts:
                if maybe_applied:
                    raise Indeterminate(
                        f"{what}: failed {failures} times, an attempt may have taken effect; "
                        f"last: {e}"
                    ) from e
                raise Determinate(f"{what}: failed {failures} times; last: {e}") from e
            config.backoff(failures, rng)


def write_part(blob: Blob, key: str, table: pa.Table, config: PersistConfig) -> PartMeta:
    """Encode ``table`` (already conformed) and store it at ``key``."""
    data = encode_part(table)
    retry_external(config, f"writing part {key!r}", lambda: blob.set(key, data))
    lo, hi = ts_bounds(table)
    times = distinct_times(table.column(TS))
    errs = err_row_count(table)
    return PartMeta(key, len(data), table.num_rows, lo, hi, part_digest(data), times, errs)


def read_part(
    blob: Blob, part: PartMeta, data_schema: pa.Schema, config: PersistConfig
) -> pa.Table:
    """Fetch and decode one part; PartError if it is missing or corrupt."""
    data = retry_external(
        config, f"reading part {part.key!r}", lambda: blob.get(part.key), reads=True
    )
    return decode_part(part.key, check_part_bytes(part, data), data_schema)


def read_part_times(blob: Blob, part: PartMeta, config: PersistConfig) -> pa.ChunkedArray:
    """Fetch one part and decode only its ``_ts`` column; PartError if it is missing or
    corrupt (size, digest, page checksums, or a column that does not validate)."""
    data = retry_external(
        config, f"reading part {part.key!r}", lambda: blob.get(part.key), reads=True
    )
    data = check_part_bytes(part, data)
    try:
        table = pq.read_table(pa.BufferReader(data), columns=[TS], page_checksum_verification=True)
        table.validate(full=True)
        return table.column(TS).cast(pa.int64())
    except Exception as e:  # pyarrow raises several types for corrupt input
        raise PartError(part.key, f"corrupt: {type(e).__name__}: {str(e)[:300]}") from e


def delete_keys(blob: Blob, keys: list[str], config: PersistConfig) -> int:
    """Delete ``keys``; return how many existed."""
    deleted = 0
    for key in keys:
        if retry_external(config, f"deleting {key!r}", partial(blob.delete, key)) is not None:
            deleted += 1
    return deleted


__all__ = ["delete_keys", "read_part", "read_part_times", "retry_external", "write_part"]
