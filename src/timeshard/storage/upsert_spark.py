"""The feedback UPSERT operator on Spark: the same semantics as ``upsert``, one job per tick.

```
 commands ─> _h, _key, repartition(N, _h) ──────┐  one Spark job, its action the
                                                │  local checkpoint of the new layer
 layer 0 (cached, N by _h) ── join on _h, ──────┤
 layer k ...                  then _key ────────┤
                                                v
                 dedupe per (_key, _ts) ─> lag chain per _key ─> (coalesce(1) if the state is small)
                       ─> mapInArrow (UpsertPass): part ─> blob, its PartMeta ─> accumulator
                                                   layer rows ─> checkpoint (N by _h: stated,
                                                      or repartition(N, _h) after a coalesce)
 driver: Batch(parts) ─> compare_and_append ─> Appended: push the layer (merges in background)
                                             └> Mismatch: delete the parts, free the layer
```

Commands are a DataFrame with the key columns, the value columns, ``_ts``
(the reclocked time), ``_order`` (the FromTime position, larger wins),
``_delete`` (boolean) and ``_err`` (a decode error, or null). One apply, at
the shard upper ``lower``:

1. brings the arranged state (:mod:`timeshard.storage.upsert_state`) to
   ``lower``: rehydrated from the shard on first use, advanced with the
   updates of other writers when the upper moved under it (jobs of their own,
   off the steady state);
2. keeps the commands with ``_ts`` in ``[lower, input upper)``, keyed by one
   struct column ``_key`` and its hash ``_h``, hash-partitioned by ``_h``
   like every layer, and joins them to each layer on the hash and then the
   key (a hash join built on the commands; the layers are not shuffled):
   each command gets its key's row (the newest layer's);
3. per ``(key, _ts)`` keeps the command with the highest ``_order``; two
   different commands at one ``_order`` (of one key and time; winning or
   not) are a caller's mistake, as in :mod:`timeshard.storage.upsert`: the
   ranking marks the winner, the pass raises InvalidUsage naming both, and
   the job fails with nothing appended (the winner never depends on the
   order of the commands);
4. for each key, orders its winners by time and takes each one's previous
   row with ``lag``; the first winner's previous row is the key's row in the
   arranged state (the feedback);
5. emits at each winner's time the retraction of the previous row and the
   insertion of the new one (nothing for a delete), skipping equal pairs:
   the tasks write them as one part per partition
   (:mod:`timeshard.storage.upsert_pass`) and yield the state of each key
   after its last winner, which becomes the new layer;
6. appends the parts as one batch at ``[lower, input upper)``; on success the
   new layer is pushed on the arrangement, on ``UpperMismatch`` the batch is
   deleted and the layer freed, and the next apply catches up from the shard.

Steps 2-5 are one Spark job (the checkpoint of the new layer); the part
metadata returns with it. A tick with no commands runs none (:meth:`advance`).

Parts per tick. The tick's commands are partitioned like the layers (``N``
partitions); a tick writes one part per non-empty partition. While the
layers are small (:data:`SMALL_STATE_BYTES`), steps 2-5 of every partition run
in one task (``coalesce(1)``, no shuffle), so the tick writes one part; the
probe of a large state needs its ``N`` tasks, and then ``N`` parts it is.
Those tasks leave each key's new layer row in its key's partition (the pass
keeps ``_h``), so the checkpoint states the layer's partitioning rather than
shuffling it once more (:func:`timeshard.spark.checkpoint.local_checkpoint`,
``hashed_by``): the job is two stages, not three.

Invariants:

1. The output at every time ``t`` is the last value per key among the
   commands reclocked to ``<= t`` (highest ``_order`` within one time); an
   err command makes the key's row an err row, which a later value or delete
   retracts.
2. Keys are compared null-safely: a null key is one key (``_key`` is a
   struct, never null; Spark compares its null fields as equal).
3. A tick reads only its commands and the arrangement, never the whole shard
   (except for the one rehydration of a new instance).
4. An unkeyed err command (``_err`` set, every key column null: a record that
   did not decode far enough to have a key) is kept as an err row of its own,
   never retracted: no later command names its key.
5. The reader's since lags behind the arrangement (:mod:`since_holds`) but
   never passes ``time - 1``, so a catch-up can read what others appended.

Runs on the driver; the work runs in Spark tasks.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from timeshard.errors import InvalidUsage, LeaseExpired, SinceError, UpperMismatch
from timeshard.persist import Appended, Batch, PersistClient, expire_all
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.persist._internal.state import encode_schema
from timeshard.persist.write import not_appended
from timeshard.progress import Description, frontier
from timeshard.spark.checkpoint import lost_checkpoint_blocks
from timeshard.storage.since_holds import SinceHolds
from timeshard.storage.upsert_pass import (
    LAST,
    TIE,
    UPDATES,
    PartsParam,
    UpsertPass,
    delete_batch_files,
    written_parts,
)
from timeshard.storage.upsert_state import (
    GONE,
    HASH,
    KEY,
    LAYER,
    ArrangedState,
    Layer,
    stored_bytes,
    unkeyed_error,
    value_columns,
)

ORDER = "_order"
DELETE = "_delete"
UNKEYED = "_unkeyed"
STATE = "_state"
#: Below this many bytes of cached layers, a tick runs its join and pass in one
#: task and writes one part; above, one task and part per partition.
SMALL_STATE_BYTES = 32 << 20


class SparkFeedbackUpsert:
    """Applies command DataFrames to an output shard whose content is its state.

    ``holds`` schedules the since downgrades of its reader; without one the
    upsert keeps its own and steps it once per apply.
    """

    def __init__(
        self,
        spark: Any,
        client: PersistClient,
        shard_id: str,
        schema: pa.Schema,
        key_columns: Sequence[str],
        holds: SinceHolds | None = None,
    ) -> None:
        spark_schema = self.spark_schema(client, shard_id, schema, key_columns)
        self.spark = spark
        self.client = client
        self.shard_id = shard_id
        self.schema = schema
        self.keys = list(key_columns)
        self.values = [n for n in schema.names if n not in key_columns]
        self._checked: str | None = None  # the last commands schema that fit the shard
        opened: list[Any] = []
        try:  # whatever fails here, the handles opened so far are expired now
            self._writer = client.open_writer(shard_id, schema, background_compaction=True)
            opened.append(self._writer)
            self._reader = client.open_leased_reader(shard_id, schema)
            opened.append(self._reader)
            types = {f.name: f.dataType for f in spark_schema.fields}
            self.state = ArrangedState(spark, self.keys, self.values, types)
            self._parts = spark.sparkContext.accumulator([], PartsParam())
        except BaseException:
            with contextlib.suppress(Exception):  # the constructor's error is the one to see
                expire_all(opened)
            raise
        self._own_holds = holds is None
        self.holds = holds if holds is not None else SinceHolds()
        self.hold = self.holds.add(self._hold_since)

    @staticmethod
    def spark_schema(
        client: PersistClient, shard_id: str, schema: pa.Schema, key_columns: Sequence[str]
    ) -> Any:
        """The Spark schema of the upsert output ``shard_id`` (``schema``, keyed by
        ``key_columns``).

        Raises InvalidUsage, and opens nothing, if the upsert cannot keep it: a
        key column that is not one of ``schema``'s, a blob without a filesystem
        root, a type Spark cannot hold, or a map at any depth (the upsert
        compares rows with ``<=>`` and consolidates the shard's updates, which
        Spark does for no map).
        """
        from timeshard.spark.session import arrow_to_spark_schema
        from timeshard.spark.snapshot import check_groupable

        if not key_columns or any(k not in schema.names for k in key_columns):
            raise InvalidUsage(
                f"upsert key columns {list(key_columns)} must be non-empty columns of {schema}"
            )
        if client.location.blob.root_uri is None:
            raise InvalidUsage(
                f"the Spark upsert of {shard_id!r} needs a blob with a filesystem root "
                "(Spark tasks write its parts), not a memory blob"
            )
        spark_schema = arrow_to_spark_schema(schema)
        try:
            check_groupable(spark_schema)
        except InvalidUsage as e:
            raise InvalidUsage(f"the upsert of {shard_id!r} compares rows by value: {e}") from None
        return spark_schema

    def apply(self, commands: Any, input_upper: int) -> Appended | UpperMismatch | None:
        """Apply ``commands`` at ``[shard upper, input_upper)`` (one Spark job; module doc)."""
        lower = self._writer.fetch_recent_upper().time
        if lower is None or input_upper <= lower:
            return None
        self._check_schema(commands)
        self._sync(lower)
        try:
            batch, layer = self._stage(commands, lower, input_upper)
        except Exception as e:
            if lost_checkpoint_blocks(e):  # the next apply rehydrates from the shard
                self.state.wait_for_merges()
                self.state.clear()
            raise
        try:
            result = self._writer.compare_and_append_batch([batch], lower, input_upper)
        except BaseException as e:
            layer.release()
            if not_appended(e):  # else the batch may be in the shard: its parts stay
                batch.delete()
            raise
        if isinstance(result, UpperMismatch):
            batch.delete()
            layer.release()
        else:
            self.state.push(layer, input_upper)
            self._held_to(input_upper)
        return result

    @property
    def lease_lost(self) -> bool:
        """Whether the writer's lease ran out (its reader's is renewed when used)."""
        return self._writer.lease_lost

    def close(self) -> None:
        """Free the arrangement's cached layers and release the shard's handles."""
        self.state.wait_for_merges()
        self.state.clear()
        self.holds.remove(self.hold)
        expire_all([self._reader, self._writer])

    def advance(self, lower: int, input_upper: int) -> Appended | UpperMismatch:
        """Append no updates at ``[lower, input_upper)``: the input had no commands there.

        Runs no Spark job; the arrangement moves along if it was at ``lower``.
        """
        result = self._writer.compare_and_append_batch([], lower, input_upper)
        if isinstance(result, Appended) and self.state.time == lower:
            self.state.advance(input_upper)
            self._held_to(input_upper)
        return result

    # -- the state ---------------------------------------------------------------------------

    def _sync(self, lower: int) -> None:
        """Bring the arranged state to the shard upper ``lower``."""
        if self.state.time is not None and self.state.time <= lower:
            try:
                self.state.catch_up(self._reader, lower)
                return
            except (SinceError, LeaseExpired):
                pass  # the updates are no longer readable as they were: rehydrate
        # Rehydrate with a new lease. The old reader must expire now: left to its lease,
        # it would hold the shard's since and old states back for minutes.
        with contextlib.suppress(LeaseExpired):
            self._reader.expire()
        self._reader = self.client.open_leased_reader(self.shard_id, self.schema)
        self.state.rehydrate(self._reader, lower)
        self.hold.held = max(lower - 1, 0)

    def _held_to(self, upper: int) -> None:
        """The arrangement is at ``upper``: its reader may let go of times before ``upper - 1``."""
        self.hold.want(upper - 1)
        if self._own_holds:
            self.holds.step()

    def _hold_since(self, since: int) -> None:
        """Hold the shard's since at ``since`` (with a new lease if the old one ran out).

        If the since passed it meanwhile, the next catch-up sees that and rehydrates.
        """
        try:
            self._reader.downgrade_since(since)
        except LeaseExpired:
            self._reader = self.client.open_leased_reader(self.shard_id, self.schema)
            self._reader.downgrade_since(since)

    # -- the tick's job ----------------------------------------------------------------------

    def _check_schema(self, commands: Any) -> None:
        """Raise InvalidUsage (no Spark job) unless the commands' columns fit the shard.

        A tick's commands have the schema of the last tick's, as a rule: that
        one is checked once (the check builds plans, a few hundred py4j calls).
        """
        from pyspark.sql import functions as F

        from timeshard.spark.parts import column, conform_df

        seen = commands.schema.json()
        if seen == self._checked:
            return
        data = [column(n) for n in self.schema.names]
        conform_df(commands.select(*data, TS, F.lit(0).cast("long").alias(DIFF), ERR), self.schema)
        self._checked = seen

    def _stage(self, commands: Any, lower: int, upper: int) -> tuple[Batch, Layer]:
        """The tick's parts, staged as a batch, and its new layer: one Spark job."""
        from timeshard.spark.checkpoint import local_checkpoint
        from timeshard.spark.parts import await_tasks, current_task_faults, typed_errors

        blob = self.client.location.blob
        prefix = f"{self.shard_id}/{self._writer.writer_id}/{uuid.uuid4().hex}"
        assert blob.root_uri is not None
        step = UpsertPass(
            blob.root_uri,
            prefix,
            self.schema.serialize().to_pybytes(),
            tuple(self.keys),
            tuple(self.values),
            self._parts,
            current_task_faults(),
        )
        self._parts.value = []
        with self.state.pinned() as layers:
            rows = self._outputs(
                self._chain(self._winners(self._keyed(commands, lower, upper), layers))
            )
            hashed_by: tuple[str, int] | None = (HASH, self.state.partitions)
            if sum(layer.size for layer in layers) < SMALL_STATE_BYTES:
                rows = rows.coalesce(1)  # one task probes every partition: one part
                hashed_by = None
            layer_df = rows.mapInArrow(step, self._layer_type())
            if hashed_by is None:
                layer_df = self.state.partitioned(layer_df)
            try:
                with typed_errors():
                    cached = local_checkpoint(layer_df, eager=True, hashed_by=hashed_by)
            except BaseException:
                with contextlib.suppress(Exception):
                    await_tasks(self.spark)
                delete_batch_files(blob, prefix, self.client.config)
                raise
        layer = Layer(cached, stored_bytes(cached))
        try:
            parts = written_parts(self._parts.value, blob, prefix, self.client.config)
        except BaseException:
            layer.release()
            raise
        desc = Description(frontier(lower), frontier(upper))
        schema_text = encode_schema(self._writer.schema)
        owner = self._writer.writer_id
        batch = Batch(blob, self.shard_id, owner, desc, parts, schema_text, self.client.config)
        return batch, layer

    def _layer_type(self) -> Any:
        from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

        names = value_columns(len(self.values))
        return StructType(
            [
                StructField(HASH, LongType(), False),
                StructField(KEY, self.state.key_type, False),
                *[
                    StructField(n, self.state.types[v])
                    for v, n in zip(self.values, names, strict=True)
                ],
                StructField(ERR, StringType()),
                StructField(GONE, BooleanType(), False),
            ]
        )

    def _keyed(self, commands: Any, lower: int, upper: int) -> Any:
        """The tick's commands, keyed by ``_key`` and ``_h``, hash-partitioned like the layers."""
        from timeshard.spark.sqltext import bigint_within

        cmds = commands.where(bigint_within(TS, lower, upper))
        keyed = cmds.select(
            self.state.key_of(cmds),
            *self.state.value_cols(cmds),
            TS,
            ORDER,
            DELETE,
            ERR,
            unkeyed_error(self.keys).alias(UNKEYED),
        )
        return self.state.partitioned(self.state.hashed(keyed))

    def _winners(self, keyed: Any, layers: list[Layer]) -> Any:
        """Per ``(key, _ts)`` the command with the highest ``_order``, as its new row.

        Each carries its key's row in the arrangement (``_state``: values,
        ``_err``, ``_gone``; null if no layer has the key). ``_order`` is the
        command's FromTime position: unique per record and totally ordered (a
        struct compares field by field). Ingestion gives ``(_partition,
        _offset)``, partition names compared as UTF-8 bytes
        (:mod:`timeshard.storage.file_source`, "Order"). Unkeyed err commands
        are all kept, marked ``_unkeyed``: they name no key, so they take no
        part in ranking the null key's commands.

        ``_tie`` (:data:`TIE`): null, or two different commands of the key and
        time that share an ``_order`` (the pass refuses them). In the ranking
        the rows of one ``_order`` are adjacent: they differ somewhere if and
        only if two adjacent ones differ (the rows of one command, once per
        layer with its key, are equal).
        """
        values = value_columns(len(self.values))
        joined = self.state.with_layer_rows(keyed, layers, STATE, skip=UNKEYED)
        command = f"struct({', '.join([*values, ERR, DELETE])})"
        # _h first: the rows are partitioned by it, so the window needs no exchange. The
        # top command comes once per layer with its key: the newest layer's row ranks first.
        per_time = f"PARTITION BY {HASH}, {KEY}, {UNKEYED}, {TS}"
        ranking = f"{per_time} ORDER BY {ORDER} DESC, {LAYER} DESC"
        ranked = joined.selectExpr(
            "*",
            f"row_number() OVER ({ranking}) AS _rank",
            f"lag(struct({ORDER} AS o, {command} AS c)) OVER ({ranking}) AS _above",
        )
        tie = (
            f"CASE WHEN NOT {UNKEYED} AND _above.o <=> {ORDER} AND NOT (_above.c <=> {command}) "
            f"THEN struct({ORDER} AS {ORDER}, least(_above.c, {command}) AS a, "
            f"greatest(_above.c, {command}) AS b) END"
        )
        # The same partitioning as the ranking's, and its order suffices: no sort of its own.
        ties = ranked.selectExpr("*", f"max({tie}) OVER ({per_time}) AS {TIE}")
        top = ties.where(f"_rank = 1 OR {UNKEYED}")
        # The new row of each winner: null values and no row at all for a delete.
        return top.selectExpr(
            HASH,
            KEY,
            TS,
            *[f"CASE WHEN {ERR} IS NULL THEN {v} END AS {v}" for v in values],
            ERR,
            f"{DELETE} AND {ERR} IS NULL AS {GONE}",
            UNKEYED,
            STATE,
            TIE,
        )

    def _chain(self, winners: Any) -> Any:
        """Each winner with ``_prev`` (its key's previous row or null) and ``_last``."""
        per_key = f"PARTITION BY {HASH}, {KEY}, {UNKEYED} ORDER BY {TS}"
        row = f"struct({', '.join([*value_columns(len(self.values)), ERR, GONE])})"
        return winners.selectExpr(
            "*",
            f"coalesce(lag({row}) OVER ({per_key}), {STATE}) AS _prev",
            f"lead({TS}) OVER ({per_key}) IS NULL AND NOT {UNKEYED} AS {LAST}",
        )

    def _outputs(self, chained: Any) -> Any:
        """Per winner: ``_upd`` (its retraction and insertion, if it changes its key), the rest.

        An unkeyed err winner inserts itself and is no key's state.
        """
        values = value_columns(len(self.values))
        had = f"(_prev IS NOT NULL AND NOT _prev.{GONE})"
        same = " AND ".join([had, f"NOT {GONE}", *[f"{v} <=> _prev.{v}" for v in [*values, ERR]]])
        old = ", ".join([*[f"_prev.{v} AS {v}" for v in values], f"CAST(-1 AS BIGINT) AS {DIFF}"])
        new = ", ".join([*values, f"CAST(1 AS BIGINT) AS {DIFF}"])
        retract = (
            f"CASE WHEN NOT {UNKEYED} AND {had} AND NOT ({same}) "
            f"THEN struct({old}, _prev.{ERR} AS {ERR}) END"
        )
        insert = (
            f"CASE WHEN {UNKEYED} OR (NOT {GONE} AND NOT ({same})) "
            f"THEN struct({new}, {ERR} AS {ERR}) END"
        )
        updates = f"filter(array({retract}, {insert}), u -> u IS NOT NULL) AS {UPDATES}"
        return chained.selectExpr(HASH, KEY, TS, updates, LAST, *values, ERR, GONE, TIE)


__all__ = ["DELETE", "ORDER", "SparkFeedbackUpsert"]
