"""Progress tracking: timestamps, frontiers and batch descriptions.

This package never imports PySpark or any storage backend.
"""

from timeshard.progress.description import Description
from timeshard.progress.frontier import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    Frontier,
    Timestamp,
    advance_by,
    check_timestamp,
    frontier,
)

__all__ = [
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "Description",
    "Frontier",
    "Timestamp",
    "advance_by",
    "check_timestamp",
    "frontier",
]
