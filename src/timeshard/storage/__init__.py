"""storage: ingestion -- reclocking source offsets into timestamps, envelopes."""

from timeshard.storage.reclock import REMAP_SCHEMA, Remap, SourceFrontier, join_frontiers
from timeshard.storage.tpch import TpchGenerator
from timeshard.storage.upsert import FeedbackUpsert, UpsertCommand

__all__ = [
    "REMAP_SCHEMA",
    "FeedbackUpsert",
    "Remap",
    "SourceFrontier",
    "TpchGenerator",
    "UpsertCommand",
    "join_frontiers",
]
