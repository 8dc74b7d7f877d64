"""The entry point of persist: open shards on a location.

``PersistClient(location)`` opens write handles, leased read handles and
critical since handles on shards named by id. The first opener of a shard
creates it with the schema it passes; later openers must pass the same schema
or none.

Shard ids are 1-200 characters of ``[A-Za-z0-9_.=-]`` that start with a letter,
digit or ``_`` and contain no ``..``; anything else raises InvalidUsage before
any storage is touched.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, LeaseExpired, UpperMismatch
from timeshard.location import Location
from timeshard.location.consensus import check_consensus_key
from timeshard.persist._internal import transitions as tr
from timeshard.persist._internal.blobio import retry_external
from timeshard.persist._internal.machine import Machine
from timeshard.persist._internal.parts import check_data_schema, check_spark_readable
from timeshard.persist._internal.state import ShardState, decode_schema, encode_schema
from timeshard.persist.compaction import Compactor, compact_shard
from timeshard.persist.config import PersistConfig
from timeshard.persist.critical import SinceHandle, check_opaque
from timeshard.persist.fetch import UnleasedReader
from timeshard.persist.gc import GcReport, collect_garbage
from timeshard.persist.heartbeat import Heartbeats
from timeshard.persist.read import ReadHandle
from timeshard.persist.write import WriteHandle
from timeshard.progress import Frontier

#: A writer name leaves room in its id (200 characters) for ``.`` and 32 hex digits.
_WRITER_NAME_MAX = 200 - 33


def check_shard_id(shard_id: object) -> str:
    """Return ``shard_id`` if valid, else raise InvalidUsage naming it."""
    try:
        return check_consensus_key(shard_id)
    except InvalidUsage:
        raise InvalidUsage(
            f"invalid shard id {shard_id!r}: use 1-200 characters of [A-Za-z0-9_.=-] "
            "starting with a letter, digit or '_'"
        ) from None


def _arrow_schema(schema: object) -> pa.Schema:
    """``schema`` as Arrow, every column nullable (err rows carry no data).

    A pyarrow Schema is taken as is, a Spark StructType converted.
    """
    if isinstance(schema, pa.Schema):
        return pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)
    if type(schema).__module__.startswith("pyspark.") and hasattr(schema, "fields"):
        from timeshard.spark.session import spark_to_arrow_schema

        return _arrow_schema(spark_to_arrow_schema(schema))  # type: ignore[arg-type]
    raise InvalidUsage(
        f"a shard schema must be a pyarrow.Schema or a Spark StructType, "
        f"got {type(schema).__name__}"
    )


def expire_all(handles: Iterable[Any]) -> None:
    """Expire every handle (writers, leased readers, listens), even if some fail.

    A handle whose lease already ran out is skipped; the first other error is
    raised once every handle was tried.
    """
    first: Exception | None = None
    for handle in handles:
        try:
            handle.expire()
        except LeaseExpired:
            continue
        except Exception as e:
            first = first or e
    if first is not None:
        raise first


class PersistClient:
    """Opens handles on the shards of one location. Runs on the driver."""

    def __init__(self, location: Location, config: PersistConfig | None = None) -> None:
        self.location = location
        self.config = config or PersistConfig()
        self.heartbeats = Heartbeats(self.config)

    def _machine(self, shard_id: str, schema: pa.Schema | object | None) -> Machine:
        check_shard_id(shard_id)
        machine = Machine(shard_id, self.location.consensus, self.config)
        if schema is None:
            machine.fetch()
            return machine
        schema = _arrow_schema(schema)
        check_spark_readable(check_data_schema(schema))
        state = machine.create(ShardState(shard_id=shard_id, schema=encode_schema(schema)))
        stored = decode_schema(state.schema)
        if not stored.equals(schema):
            raise InvalidUsage(
                f"schema mismatch for shard {shard_id!r}: opened with {schema}, it holds {stored}"
            )
        return machine

    def open_writer(
        self,
        shard_id: str,
        schema: pa.Schema | None = None,
        *,
        writer_id: str | None = None,
        background_compaction: bool = False,
    ) -> WriteHandle:
        """Register a new writer on ``shard_id`` (creating the shard if ``schema``).

        ``writer_id`` names the writer (in its id and its parts' keys); the id
        is always new, ``<writer_id>.<random>``. A writer whose lease ran out
        may still be running, with batches staged under its id whose parts GC
        deleted: a later writer of the same name must not make that id
        registered again, or the stalled one would append the missing parts.
        """
        if writer_id is not None:
            check_consensus_key(writer_id)
            if len(writer_id) > _WRITER_NAME_MAX:
                raise InvalidUsage(
                    f"writer name {writer_id!r} is longer than {_WRITER_NAME_MAX} characters"
                )
        machine = self._machine(shard_id, schema)
        wid = f"{writer_id}.{uuid.uuid4().hex}" if writer_id is not None else f"w{uuid.uuid4().hex}"
        now = self.config.now_ms()
        machine.apply(lambda s: tr.register_writer(s, wid, now, self.config.writer_lease_ms))
        compactor = None
        if background_compaction and self.config.compaction_enabled:
            compactor = Compactor(
                Machine(shard_id, self.location.consensus, self.config),
                self.location.consensus,
                self.location.blob,
                wid,
                self.config,
            )
        return WriteHandle(
            machine,
            self.location.blob,
            wid,
            self.config,
            compactor=compactor,
            heartbeats=self.heartbeats,
        )

    def open_leased_reader(
        self, shard_id: str, schema: pa.Schema | None = None, *, name: str | None = None
    ) -> ReadHandle:
        """Register a leased reader; its since starts at the shard's since. ``name`` names
        it (its id is ``<name>.<random>``, as a named writer's), so that others can tell
        whose it is and whether it is alive (its heartbeats)."""
        if name is not None:
            check_consensus_key(name)
            if len(name) > _WRITER_NAME_MAX:
                raise InvalidUsage(f"reader name {name!r} is longer than {_WRITER_NAME_MAX}")
        machine = self._machine(shard_id, schema)
        rid = f"{name}.{uuid.uuid4().hex}" if name is not None else f"r{uuid.uuid4().hex}"
        now = self.config.now_ms()
        machine.apply(lambda s: tr.register_leased_reader(s, rid, now, self.config.reader_lease_ms))
        return ReadHandle(machine, self.location.blob, rid, self.config, self.heartbeats)

    def open_unleased_reader(self, shard_id: str) -> UnleasedReader:
        """A reader that writes nothing to consensus (read-only replicas, tools)."""
        return UnleasedReader(self._machine(shard_id, None), self.location.blob, self.config)

    def open(
        self, shard_id: str, schema: pa.Schema | None = None
    ) -> tuple[WriteHandle, ReadHandle]:
        """A writer and a leased reader of ``shard_id``."""
        return self.open_writer(shard_id, schema), self.open_leased_reader(shard_id, schema)

    def open_critical_since(
        self,
        shard_id: str,
        reader_id: str,
        initial_opaque: str,
        schema: pa.Schema | None = None,
    ) -> SinceHandle:
        """The critical since handle ``reader_id``, registered with ``initial_opaque``."""
        check_consensus_key(reader_id)
        check_opaque(initial_opaque)
        machine = self._machine(shard_id, schema)
        reader = machine.apply(lambda s: tr.register_critical_reader(s, reader_id, initial_opaque))
        return SinceHandle(machine, reader_id, reader.opaque)

    def drop_critical_since(self, shard_id: str, reader_id: str) -> bool:
        """Remove the critical since hold ``reader_id``; True if there was one."""
        machine = self._machine(shard_id, None)
        return bool(machine.apply(lambda s: tr.expire_critical_reader(s, reader_id)))

    def close_shard(self, shard_id: str) -> None:
        """Close ``shard_id`` for good: its upper becomes the empty frontier, after which no
        writer appends to it (a dropped object's shard, whose name is not used again).
        What it holds stays readable by id. Idempotent; a writer racing the close either
        lands first (the close then ends after it) or finds the shard closed."""
        writer = self.open_writer(shard_id)
        try:
            upper = writer.fetch_recent_upper()
            while not upper.is_empty():
                result = writer.compare_and_append_batch([], upper, None)
                upper = result.current if isinstance(result, UpperMismatch) else Frontier.empty()
        finally:
            writer.expire()

    def list_shards(self) -> list[str]:
        """Every shard id of the location (storage failures retried like any read)."""
        consensus = self.location.consensus
        return retry_external(
            self.config, "listing shards", lambda: list(consensus.list_keys()), reads=True
        )

    def state(self, shard_id: str) -> ShardState:
        """The current state of ``shard_id``; InvalidUsage if there is none."""
        return self._machine(shard_id, None).fetch()

    def compact(self, shard_id: str) -> int:
        """Run compaction of ``shard_id`` to completion on this thread; return merges."""
        machine = self._machine(shard_id, None)
        wid = f"w{uuid.uuid4().hex}"
        now = self.config.now_ms()
        machine.apply(lambda s: tr.register_writer(s, wid, now, self.config.writer_lease_ms))
        try:
            return compact_shard(machine, self.location.blob, wid, self.config)
        finally:
            machine.apply(lambda s: tr.expire_writer(s, wid))

    def gc(self, shard_id: str) -> GcReport:
        """Expire stale leases, delete unreferenced blobs, truncate dead versions."""
        machine = self._machine(shard_id, None)
        return collect_garbage(machine, self.location.consensus, self.location.blob, self.config)


__all__ = ["PersistClient", "check_shard_id"]
