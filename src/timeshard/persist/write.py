"""Writing to a shard: staged batches and compare-and-append.

A :class:`WriteHandle` is one registered writer of a shard. ``batch`` stages
updates as Parquet parts under the writer's own blob prefix; staged batches
become part of the shard only through ``compare_and_append_batch``, which
linearizes every writer of the shard through consensus.

``batch`` accepts a pyarrow Table, an iterable of ``(row, time, diff)`` with
``row`` a dict or a tuple in schema order, or a Spark DataFrame. DataFrames are
written by Spark tasks in parallel (``timeshard.spark.parts``), the rest on the
calling thread through pyarrow. Either way this module runs on the driver.

Invariants:

1. A staged batch's updates are all at times in ``[lower, upper)``; it is an
   error to stage one that is not.
2. ``compare_and_append_batch`` commits only if the shard upper is exactly
   ``expected_upper``; then the upper becomes ``new_upper``. It is an error to
   pass one batch (or copies of it) twice.
3. A retry after an indeterminate failure never appends twice: every append
   carries an idempotency token that the writer's state remembers.
4. An append with a ``fence`` commits only while the fencing critical reader
   holds the expected token, decided in the same compare-and-set as the upper
   (a writer of an older deploy generation cannot append after a newer one
   took over); otherwise it raises :class:`Fenced` and appends nothing.
5. Parts of a staged batch are either appended, deleted by ``Batch.delete``,
   or collected by GC once their writer is expired.
6. Every part staged here records its time bounds and, up to
   ``MAX_PART_TIMES``, its distinct times (``write_part`` on the driver,
   ``write_parts`` in Spark tasks); a transmitted batch carries them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from timeshard.errors import Determinate, Fenced, InvalidUsage, LeaseExpired, UpperMismatch
from timeshard.location.blob import Blob
from timeshard.persist._internal import transitions as tr
from timeshard.persist._internal.blobio import delete_keys, write_part
from timeshard.persist._internal.machine import Machine
from timeshard.persist._internal.parts import DIFF, TS, PartMeta, conform
from timeshard.persist._internal.state import decode_schema, encode_schema
from timeshard.persist._internal.transitions import Appended
from timeshard.persist.config import PersistConfig
from timeshard.persist.heartbeat import Heartbeats
from timeshard.progress import Description, Frontier, frontier

BATCH_ENCODING_VERSION = 1


class Batch:
    """A staged batch: parts written to blob, not yet part of the shard.

    It is an error to append a batch twice or to use it after ``delete``.
    """

    def __init__(
        self,
        blob: Blob | None,
        shard_id: str,
        owner: str,
        desc: Description,
        parts: tuple[PartMeta, ...],
        schema: str,
        config: PersistConfig,
    ) -> None:
        self._blob = blob
        self.shard_id = shard_id
        self.owner = owner
        self.desc = desc
        self.parts = parts
        self.schema = schema
        self._config = config
        self.status = "staged"

    @property
    def num_rows(self) -> int:
        return sum(p.num_rows for p in self.parts)

    def into_transmittable(self) -> bytes:
        """An encoding another process can turn back into this batch."""
        self._check_staged("transmit")
        return json.dumps(
            {
                "version": BATCH_ENCODING_VERSION,
                "shard_id": self.shard_id,
                "owner": self.owner,
                "desc": self.desc.to_json(),
                "parts": [p.to_json() for p in self.parts],
                "schema": self.schema,
            },
            sort_keys=True,
        ).encode("utf-8")

    def delete(self) -> None:
        """Delete the batch's parts. It is an error to delete an appended batch."""
        if self.status == "deleted":
            return
        self._check_staged("delete")
        if self._blob is not None:
            delete_keys(self._blob, [p.key for p in self.parts], self._config)
        self.status = "deleted"

    def _check_staged(self, action: str) -> None:
        if self.status != "staged":
            raise InvalidUsage(
                f"cannot {action} batch {self.desc} of shard {self.shard_id!r}: it is {self.status}"
            )

    def __repr__(self) -> str:
        return (
            f"Batch(shard={self.shard_id!r}, desc={self.desc}, parts={len(self.parts)}, "
            f"rows={self.num_rows}, {self.status})"
        )


class WriteHandle:
    """A registered writer of one shard. Runs on the driver."""

    def __init__(
        self,
        machine: Machine,
        blob: Blob,
        writer_id: str,
        config: PersistConfig,
        *,
        compactor: Any = None,
        heartbeats: Heartbeats | None = None,
    ) -> None:
        self._machine = machine
        self._blob = blob
        self.writer_id = writer_id
        self._config = config
        self._schema_text = machine.state.schema
        self.schema: pa.Schema = decode_schema(self._schema_text)
        self._compactor = compactor
        self._lock = threading.Lock()
        self._last_heartbeat = config.now_ms()
        #: Set when the lease ran out: the handle is gone and must be opened anew.
        self.lease_lost = False
        self._heartbeats = heartbeats
        if heartbeats is not None:
            heartbeats.register(self)

    @property
    def shard_id(self) -> str:
        return self._machine.shard_id

    @property
    def blob(self) -> Blob:
        """The blob this shard's parts live in."""
        return self._blob

    @property
    def upper(self) -> Frontier:
        """The shard upper as this handle last saw it (may be stale)."""
        return self._machine.state.upper

    def fetch_recent_upper(self) -> Frontier:
        """The shard upper as consensus has it now."""
        return self._machine.fetch().upper

    def wait_for_upper_past(
        self, frontier_: Frontier | int, timeout_s: float | None = None
    ) -> Frontier:
        """Block until the shard upper is beyond ``frontier_``; return it.

        Raises TimeoutError after ``timeout_s`` seconds.
        """
        target = frontier(frontier_)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = 0.005
        while True:
            upper = self.fetch_recent_upper()
            if target < upper:
                return upper
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"shard {self.shard_id!r} upper {upper} not past {target}")
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def batch(self, updates: Any, lower: Frontier | int, upper: Frontier | int | None) -> Batch:
        """Stage ``updates`` (all at times in ``[lower, upper)``) as a batch."""
        lo, hi = frontier(lower), frontier(upper)
        desc = Description(lo, hi)
        batch_id = uuid.uuid4().hex
        prefix = f"{self.shard_id}/{self.writer_id}/{batch_id}"
        if _is_spark_dataframe(updates):
            from timeshard.spark.parts import write_parts

            parts = tuple(write_parts(updates, self._blob, prefix, self.schema))
            try:
                _check_part_times(parts, desc)
            except InvalidUsage:
                delete_keys(self._blob, [p.key for p in parts], self._config)
                raise
        else:
            table = self._to_table(updates)
            _check_times(table, desc)
            parts = self._write_table(table, prefix)
        return Batch(
            self._blob, self.shard_id, self.writer_id, desc, parts, self._schema_text, self._config
        )

    def batch_from_transmittable(self, data: bytes) -> Batch:
        """Rebuild a batch another handle staged; it must belong to this shard."""
        try:
            value = json.loads(data.decode("utf-8"))
            if value["version"] != BATCH_ENCODING_VERSION:
                raise ValueError(f"unknown batch encoding version {value['version']!r}")
            desc = Description.from_json(value["desc"])
            parts = tuple(PartMeta.from_json(p) for p in value["parts"])
            shard_id, owner, schema = value["shard_id"], value["owner"], value["schema"]
        except (ValueError, KeyError, TypeError) as e:
            raise InvalidUsage(f"not a transmittable batch: {e}") from e
        if shard_id != self.shard_id:
            raise InvalidUsage(
                f"batch from shard {shard_id!r} cannot be used with shard {self.shard_id!r}"
            )
        if decode_schema(schema) != self.schema:
            raise InvalidUsage(
                f"schema mismatch: batch has {decode_schema(schema)}, shard has {self.schema}"
            )
        stray = [p.key for p in parts if not p.key.startswith(f"{shard_id}/{owner}/")]
        if not isinstance(owner, str) or "/" in owner or stray:  # GC reads the owner from keys
            raise InvalidUsage(f"batch parts {stray[:3]} are not under {shard_id}/{owner!s}/")
        return Batch(self._blob, shard_id, owner, desc, parts, schema, self._config)

    def compare_and_append_batch(
        self,
        batches: list[Batch],
        expected_upper: Frontier | int,
        new_upper: Frontier | int | None,
        *,
        token: str | None = None,
        since_floor: int | None = None,
        fence: tuple[str, str] | None = None,
        fence_since: int | None = None,
    ) -> Appended | UpperMismatch:
        """Append ``batches`` as ``[expected_upper, new_upper)`` if the upper is expected.

        ``since_floor`` (a time before ``new_upper``) raises the shard's since,
        and every reader's, to it in the same step: the times before it are
        declared unreadable (see ``transitions.compare_and_append``).

        ``fence`` ``(critical_reader_id, opaque)``: append only while that
        critical reader's token is ``opaque``, else raise :class:`Fenced` having
        appended nothing (its batches may be deleted). ``fence_since`` (a time before
        ``new_upper``, with ``fence``) advances that reader's since to it, never back,
        in the same compare-and-set.
        """
        if token is not None and not isinstance(token, str):
            raise InvalidUsage(f"the idempotency token {token!r} is not a string")
        if fence is not None and (
            not isinstance(fence, tuple)
            or len(fence) != 2
            or not all(isinstance(f, str) for f in fence)
        ):
            raise InvalidUsage(f"fence {fence!r} is not a (critical reader id, opaque) pair")
        expected, new = frontier(expected_upper), frontier(new_upper)
        if not expected <= new:
            raise InvalidUsage(
                f"invalid bounds: expected upper {expected} is beyond new upper {new}"
            )
        floor = None if since_floor is None else frontier(since_floor)
        if floor is not None and not floor < new:
            raise InvalidUsage(f"since_floor {since_floor} is not before the new upper {new}")
        fence_to = None if fence_since is None else frontier(fence_since)
        if fence_to is not None and (fence is None or not fence_to < new):
            raise InvalidUsage(
                f"fence_since {fence_since} needs a fence and a time before the new upper {new}"
            )
        for b in batches:
            b._check_staged("append")
            if b.shard_id != self.shard_id:
                raise InvalidUsage(
                    f"batch from shard {b.shard_id!r} cannot be appended to {self.shard_id!r}"
                )
            if b.schema != self._schema_text and decode_schema(b.schema) != self.schema:
                raise InvalidUsage(
                    f"schema mismatch: batch schema differs from shard {self.shard_id!r}"
                )
            if b.desc.lower != expected or b.desc.upper != new:
                raise InvalidUsage(
                    f"batch {b.desc} does not match the append bounds [{expected}, {new})"
                )
        parts = tuple(p for b in batches for p in b.parts)
        _check_distinct(parts)
        owners = tuple(sorted({b.owner for b in batches}))
        token_ = token or uuid.uuid4().hex
        result = self._machine.apply(
            lambda s: tr.compare_and_append(
                s,
                writer_id=self.writer_id,
                owners=owners,
                parts=parts,
                expected_upper=expected,
                new_upper=new,
                token=token_,
                now_ms=self._config.now_ms(),
                since_floor=floor,
                fence=fence,
                fence_since=fence_to,
            )
        )
        assert isinstance(result, Appended | UpperMismatch), result
        if isinstance(result, Appended):
            for b in batches:
                b.status = "appended"
            self._last_heartbeat = self._config.now_ms()
            if self._compactor is not None:
                self._compactor.request()
        return result

    def compare_and_append(
        self, updates: Any, expected_upper: Frontier | int, new_upper: Frontier | int | None
    ) -> Appended | UpperMismatch:
        """Stage ``updates`` and append them; on a mismatch the staged parts are deleted."""
        batch = self.batch(updates, expected_upper, new_upper)
        try:
            result = self.compare_and_append_batch([batch], expected_upper, new_upper)
        except BaseException as e:
            if not_appended(e) and batch.status == "staged":
                batch.delete()
            raise
        if isinstance(result, UpperMismatch):
            batch.delete()
        return result

    def append(self, updates: Any, lower: Frontier | int, upper: Frontier | int | None) -> Appended:
        """Append ``updates`` at ``[lower, upper)``; raise UpperMismatch if upper is not lower."""
        result = self.compare_and_append(updates, lower, upper)
        if isinstance(result, UpperMismatch):
            raise result
        return result

    def heartbeat(self) -> None:
        """Renew this writer's lease. Raises LeaseExpired if it already ran out."""
        now = self._config.now_ms()
        self._machine.apply(lambda s: tr.heartbeat_writer(s, self.writer_id, now))
        self._last_heartbeat = now

    renew_lease = heartbeat

    def last_renewal_ms(self) -> int:
        return self._last_heartbeat

    def expire(self) -> None:
        """Deregister this writer; its unappended batches become garbage for GC.

        Stops its background compactor and heartbeats first (waiting for a
        merge in flight).
        """
        if self._heartbeats is not None:
            self._heartbeats.unregister(self)
        if self._compactor is not None:
            self._compactor.close()
        self._machine.apply(lambda s: tr.expire_writer(s, self.writer_id))

    @property
    def compactor(self) -> Any:
        """The background :class:`~timeshard.persist.compaction.Compactor`, if any."""
        return self._compactor

    def compact(self) -> int:
        """Run compaction on the calling thread until nothing is left; return merges."""
        from timeshard.persist.compaction import compact_shard

        return compact_shard(self._machine, self._blob, self.writer_id, self._config)

    def _to_table(self, updates: Any) -> pa.Table:
        if isinstance(updates, pa.RecordBatch):
            updates = pa.Table.from_batches([updates])
        if isinstance(updates, pa.Table):
            return conform(updates, self.schema)
        return conform(_rows_to_table(updates, self.schema), self.schema)

    def _write_table(self, table: pa.Table, prefix: str) -> tuple[PartMeta, ...]:
        if table.num_rows == 0:
            return ()
        step = self._config.blob_target_part_rows
        parts = []
        for i, start in enumerate(range(0, table.num_rows, step)):
            key = f"{prefix}/part-{i:05d}.parquet"
            parts.append(write_part(self._blob, key, table.slice(start, step), self._config))
        return tuple(parts)


def _is_spark_dataframe(value: Any) -> bool:
    return type(value).__module__.startswith("pyspark.") and hasattr(value, "mapInArrow")


def _rows_to_table(updates: Iterable[Any], schema: pa.Schema) -> pa.Table:
    names = schema.names
    columns: dict[str, list[Any]] = {n: [] for n in names}
    ts: list[int] = []
    diffs: list[int] = []
    try:
        for row, t, d in updates:
            if isinstance(row, dict):
                extra = set(row) - set(names)
                if extra:
                    raise InvalidUsage(f"schema mismatch: row has unknown columns {sorted(extra)}")
                for n in names:
                    columns[n].append(row.get(n))
            else:
                values = tuple(row)
                if len(values) != len(names):
                    raise InvalidUsage(
                        f"schema mismatch: row {values!r} has {len(values)} values, "
                        f"schema has {len(names)} columns {names}"
                    )
                for n, v in zip(names, values, strict=True):
                    columns[n].append(v)
            ts.append(t)
            diffs.append(d)
    except (TypeError, ValueError) as e:
        if isinstance(e, InvalidUsage):
            raise
        raise InvalidUsage(f"updates must be (row, time, diff) triples: {e}") from e
    arrays: dict[str, Any] = dict(columns)
    arrays[TS] = ts
    arrays[DIFF] = diffs
    try:
        return pa.table(
            {
                **{n: pa.array(columns[n], schema.field(n).type) for n in names},
                TS: pa.array(ts, pa.int64()),
                DIFF: pa.array(diffs, pa.int64()),
            }
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise InvalidUsage(f"schema mismatch: updates do not fit {schema}: {e}") from e


def _check_times(table: pa.Table, desc: Description) -> None:
    if table.num_rows == 0:
        return
    mm = pc.min_max(table.column(TS))
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    _check_bounds(lo, hi, desc)


def _check_part_times(parts: tuple[PartMeta, ...], desc: Description) -> None:
    for p in parts:
        if p.num_rows:
            assert p.ts_min is not None and p.ts_max is not None, p
            _check_bounds(p.ts_min, p.ts_max, desc)


def _check_bounds(lo: int, hi: int, desc: Description) -> None:
    if lo < 0:
        raise InvalidUsage(f"update at time {lo} is not a valid timestamp")
    if not desc.lower.less_equal(lo):
        raise InvalidUsage(f"update at time {lo} is not beyond lower {desc.lower}")
    if desc.upper.less_equal(hi):
        raise InvalidUsage(f"update at time {hi} is beyond upper {desc.upper}")


def _check_distinct(parts: tuple[PartMeta, ...]) -> None:
    """InvalidUsage if a part is appended twice (a batch passed twice, or with a copy)."""
    seen: set[str] = set()
    for p in parts:
        if p.key in seen:
            raise InvalidUsage(
                f"part {p.key!r} is appended more than once: the same batch (or a copy of "
                "it) is passed twice, and its updates would be counted twice"
            )
        seen.add(p.key)


def not_appended(error: BaseException) -> bool:
    """Whether ``error``, raised by a compare-and-append, proves nothing was appended: then
    its staged batches may be deleted.

    Any other error may have come after the commit (an ``Indeterminate``
    write, a Ctrl-C as the write returns, a state that does not decode on the
    read that follows): the batches' parts must stay, for the shard may hold
    them. Left unreferenced, they are garbage collected with their writer.
    """
    return isinstance(error, InvalidUsage | Determinate | LeaseExpired | Fenced)


__all__ = ["Appended", "Batch", "WriteHandle", "encode_schema", "not_appended"]
