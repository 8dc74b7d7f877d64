"""storage: ingestion -- reclocking source offsets into timestamps, envelopes."""

from timeshard.storage.reclock import REMAP_SCHEMA, Remap, SourceFrontier, join_frontiers

__all__ = ["REMAP_SCHEMA", "Remap", "SourceFrontier", "join_frontiers"]
