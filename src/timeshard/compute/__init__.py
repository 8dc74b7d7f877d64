"""compute: materialized views kept in shards by the self-correcting sink."""

from timeshard.compute.engine import ArrowEngine, Engine, SparkEngine
from timeshard.compute.materialized_view import MaterializedView
from timeshard.compute.mv_sink import (
    DEPLOY_READER,
    Desired,
    IoWorker,
    Mint,
    MvSink,
    SinkFrontiers,
    SinkStats,
)
from timeshard.compute.view import SparkViewDesired, ViewDefinition

__all__ = [
    "DEPLOY_READER",
    "ArrowEngine",
    "Desired",
    "Engine",
    "IoWorker",
    "MaterializedView",
    "Mint",
    "MvSink",
    "SinkFrontiers",
    "SinkStats",
    "SparkEngine",
    "SparkViewDesired",
    "ViewDefinition",
]
