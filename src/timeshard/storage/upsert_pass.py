"""The last pass of an UPSERT tick, in each Spark task: write the part, emit the new layer.

```
 winners of one partition (Arrow batches)            executors
   _h, _key, _ts, _upd: [update, ..], _last, _v0.., _err, _gone, _tie
      │
      ├── _upd flattened, keys unwrapped, cast ──> one Parquet part (write_part_file)
      │                                             │ its PartMeta ──> parts accumulator
      └── rows with _last ─────────────────────────> yielded: the new layer's rows
```

The upsert (:mod:`timeshard.storage.upsert_spark`) plans a tick as one Spark
job whose action is the local checkpoint of the new layer; this pass is the
``mapInArrow`` function of that plan. Each winner row carries the updates it
causes (``_upd``: its key's retraction and insertion, if any) and whether it
is its key's last winner of the tick (``_last``: its row is the key's new
state). The task streams the updates into one part at
``<prefix>/part-<partition>-<id>.parquet`` and, once the part is complete,
yields the layer rows. A winner with ``_tie`` set (two different commands of
its key and time at one position) fails the task with InvalidUsage naming
them, and so the job. The part's metadata reaches the driver through a
Spark accumulator (:class:`PartsParam`), with the partition and attempt that
wrote it, when the task succeeds.

What runs where: :class:`UpsertPass` and :class:`PartsParam` pickle (plain
values only) and run in executors; :func:`written_parts` runs on the driver
after the job.

Invariants:

1. A task writes at most one part, and none for a partition without updates.
2. The parts of a batch are one per partition: if a partition's task ran to
   success twice (a stage re-run), :func:`written_parts` keeps one and
   deletes the others, and it deletes every file under the batch prefix that
   no kept part names (failed attempts) and every temporary there (attempts
   killed while they wrote), as the Spark part write does. After a failed job
   :func:`delete_batch_files` deletes both, parts and temporaries.
3. A layer row is yielded only after the part is written: a task whose write
   fails yields nothing and fails the job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage
from timeshard.location.blob import Blob
from timeshard.location.unreliable import KeyedFaults
from timeshard.persist._internal.blobio import delete_keys
from timeshard.persist._internal.parts import DIFF, ERR, TS, PartMeta, conform, updates_schema
from timeshard.persist.config import PersistConfig
from timeshard.persist.gc import delete_temporaries_under
from timeshard.spark.parts import write_task_part
from timeshard.storage.upsert_state import GONE, HASH, KEY, value_columns

UPDATES = "_upd"
LAST = "_last"
#: Two different commands of a winner's key and time at one position (or null):
#: ``struct<_order, a: struct<_v0.., _err, _delete>, b: ...>``.
TIE = "_tie"

# One accumulator entry: (batch prefix, partition, attempt, PartMeta JSON or None).
PartEntry = tuple[str, int, int, dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class UpsertPass:
    """The ``mapInArrow`` function of an UPSERT tick (executors; see the module doc)."""

    root_uri: str
    key_prefix: str
    schema_ipc: bytes
    keys: tuple[str, ...]
    values: tuple[str, ...]
    parts: Any  # a pyspark Accumulator of list[PartEntry]
    faults: KeyedFaults | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        data_schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        layer: list[pa.RecordBatch] = []
        updates = self._updates(batches, data_schema, layer)
        schema = updates_schema(data_schema)
        partition, attempt, part = write_task_part(
            self.root_uri, self.key_prefix, schema, updates, self.faults
        )
        entry = (self.key_prefix, partition, attempt, None if part is None else part.to_json())
        self.parts.add([entry])
        yield from layer

    def _updates(
        self, batches: Iterator[pa.RecordBatch], data_schema: pa.Schema, layer: list[pa.RecordBatch]
    ) -> Iterator[pa.Table]:
        """The updates of ``batches`` as part tables; their layer rows go to ``layer``."""
        columns = [HASH, KEY, *value_columns(len(self.values)), ERR, GONE]
        for batch in batches:
            if batch.num_rows == 0:
                continue
            tied = batch.column(TIE)
            if tied.null_count < len(tied):
                raise self._conflict(batch.filter(tied.is_valid()).slice(0, 1))
            last = batch.filter(batch.column(LAST))
            if last.num_rows:
                layer.append(
                    pa.RecordBatch.from_arrays([last.column(c) for c in columns], names=columns)
                )
            table = self._part_table(batch, data_schema)
            if table.num_rows:
                yield table

    def _conflict(self, tied: pa.RecordBatch) -> InvalidUsage:
        """The error of the tie of ``tied``'s one row (see :data:`TIE`)."""
        row = tied.to_pylist()[0]
        key = dict(zip(self.keys, row[KEY].values(), strict=True))
        tie = row[TIE]

        def command(c: dict[str, Any]) -> dict[str, Any]:  # _v0 .. _vm by name, then the rest
            fields = list(c.items())
            named = zip(self.values, (v for _, v in fields), strict=False)
            return {**dict(named), **dict(fields[len(self.values) :])}

        return InvalidUsage(
            f"two different upsert commands at one position {tie['_order']!r}, key {key!r}, "
            f"time {row[TS]}: {command(tie['a'])!r} and {command(tie['b'])!r}"
        )

    def _part_table(self, batch: pa.RecordBatch, data_schema: pa.Schema) -> pa.Table:
        import pyarrow.compute as pc

        lists = batch.column(UPDATES)
        parents = pc.list_parent_indices(lists)
        flat = pc.list_flatten(lists).flatten()  # _v0 .. _vm, _diff, _err
        keys = batch.column(KEY).take(parents).flatten()
        found: dict[str, pa.Array] = dict(zip(self.keys, keys, strict=True))
        found.update(zip(self.values, flat[:-2], strict=True))
        found[TS] = batch.column(TS).take(parents)
        found[DIFF], found[ERR] = flat[-2], flat[-1]
        names = updates_schema(data_schema).names
        return conform(pa.table([found[n] for n in names], names=names), data_schema)


class PartsParam:
    """Accumulates :data:`PartEntry` lists (driver and executors)."""

    def zero(self, value: list[PartEntry]) -> list[PartEntry]:
        return []

    def addInPlace(self, a: list[PartEntry], b: list[PartEntry]) -> list[PartEntry]:
        a.extend(b)
        return a


def written_parts(
    entries: list[PartEntry], blob: Blob, key_prefix: str, config: PersistConfig
) -> tuple[PartMeta, ...]:
    """The parts of the batch at ``key_prefix``: one per partition (driver; invariant 2).

    ``entries`` are the accumulated entries of the job (of any batch). Files
    under the prefix that no kept part names are deleted, and so are the
    temporaries there (a failure to delete those leaves them to GC: the write
    stands).
    """
    kept: dict[int, PartMeta | None] = {}
    for prefix, partition, _attempt, part in sorted(entries, key=lambda e: (e[1], e[2])):
        if prefix == key_prefix and partition not in kept:
            kept[partition] = None if part is None else PartMeta.from_json(part)
    parts = tuple(sorted((p for p in kept.values() if p is not None), key=lambda p: p.key))
    named = {p.key for p in parts}
    extra = [m.key for m in blob.list_keys(key_prefix + "/") if m.key not in named]
    if extra:
        delete_keys(blob, extra, config)
    with contextlib.suppress(Exception):  # GC deletes them once the batch is in the shard
        delete_temporaries_under(blob, key_prefix, config)
    return parts


def delete_batch_files(blob: Blob, key_prefix: str, config: PersistConfig) -> None:
    """Delete every file under ``key_prefix`` (a failed job's parts and the temporaries of
    its killed attempts; driver)."""
    with contextlib.suppress(Exception):  # what stays behind is garbage for GC
        delete_keys(blob, [m.key for m in blob.list_keys(key_prefix + "/")], config)
    with contextlib.suppress(Exception):
        delete_temporaries_under(blob, key_prefix, config)


__all__ = [
    "LAST",
    "TIE",
    "UPDATES",
    "PartEntry",
    "PartsParam",
    "UpsertPass",
    "delete_batch_files",
    "written_parts",
]
