"""persist: durable, definite shards on blob + consensus.

The public surface is :class:`PersistClient` and the handles it opens; the
state machine lives in the private ``_internal`` package. Nothing here imports
PySpark: a Spark DataFrame handed to ``WriteHandle.batch`` is written by
``timeshard.spark.parts``, imported only then.
"""

from timeshard.persist._internal.parts import (
    DIFF,
    ERR,
    TS,
    DiffOverflow,
    PartMeta,
    updates_schema,
)
from timeshard.persist._internal.state import HollowBatch, ShardState
from timeshard.persist._internal.transitions import Appended, OpaqueMismatch
from timeshard.persist.client import PersistClient, check_shard_id, expire_all
from timeshard.persist.compaction import Compactor
from timeshard.persist.config import PersistConfig
from timeshard.persist.critical import SinceHandle
from timeshard.persist.fetch import UnleasedReader
from timeshard.persist.gc import GcReport
from timeshard.persist.read import Listen, ListenEvent, Progress, ReadHandle, Updates
from timeshard.persist.write import Batch, WriteHandle

__all__ = [
    "DIFF",
    "ERR",
    "TS",
    "Appended",
    "Batch",
    "Compactor",
    "DiffOverflow",
    "GcReport",
    "HollowBatch",
    "Listen",
    "ListenEvent",
    "OpaqueMismatch",
    "PartMeta",
    "PersistClient",
    "PersistConfig",
    "Progress",
    "ReadHandle",
    "ShardState",
    "SinceHandle",
    "UnleasedReader",
    "Updates",
    "WriteHandle",
    "check_shard_id",
    "expire_all",
    "updates_schema",
]
