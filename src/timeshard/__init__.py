"""timeshard: durable, definite, time-varying collections on Apache Spark.

The public API is re-exported here; the packages below are layered
``progress`` -> ``location`` -> ``persist`` -> ``spark`` -> ``cli``, and
dependencies point downwards only.
"""

from timeshard.errors import (
    CorruptState,
    Determinate,
    ExternalError,
    Fenced,
    Indeterminate,
    InvalidUsage,
    LeaseExpired,
    PartError,
    SinceError,
    TimeshardError,
    UpperMismatch,
)
from timeshard.progress import Description, Frontier, Timestamp

__all__ = [
    "CorruptState",
    "Description",
    "Determinate",
    "ExternalError",
    "Fenced",
    "Frontier",
    "Indeterminate",
    "InvalidUsage",
    "LeaseExpired",
    "PartError",
    "SinceError",
    "Timestamp",
    "TimeshardError",
    "UpperMismatch",
]
