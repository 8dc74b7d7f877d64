"""storage: ingestion -- reclocking source offsets into timestamps, envelopes, COPY FROM."""

from timeshard.storage.copy_from import (
    CopyError,
    CopyPlan,
    CopyReport,
    copy_files,
    plan_copy,
    run_copy,
)
from timeshard.storage.reclock import REMAP_SCHEMA, Remap, SourceFrontier, join_frontiers
from timeshard.storage.tpch import TpchGenerator
from timeshard.storage.upsert import FeedbackUpsert, UpsertCommand

__all__ = [
    "REMAP_SCHEMA",
    "CopyError",
    "CopyPlan",
    "CopyReport",
    "FeedbackUpsert",
    "Remap",
    "SourceFrontier",
    "TpchGenerator",
    "UpsertCommand",
    "copy_files",
    "join_frontiers",
    "plan_copy",
    "run_copy",
]
