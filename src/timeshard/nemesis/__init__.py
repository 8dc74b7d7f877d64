"""The nemesis: a seeded fault harness for whole pipelines, checked by ``timeshard verify``.

:class:`NemesisRunner` runs a pipeline (sources, upserts, views) as several
replica processes over one location, injects the faults of a seeded
:func:`plan_faults` -- ``kill -9``, SIGSTOP/SIGCONT, unreliable blob and
consensus, a PostgreSQL restart, a full blob disk, clock jumps of the tick
source -- then heals, measures the time to recover, and verifies the
location. ``timeshard nemesis`` is its command line.

Nothing here imports PySpark: the replicas and verify are other processes.
"""

from timeshard.nemesis.config import NemesisConfig
from timeshard.nemesis.control import Control, FaultyLocation, FullDiskBlob
from timeshard.nemesis.plan import KINDS, Fault, plan_faults
from timeshard.nemesis.results import NemesisReport, RunResult
from timeshard.nemesis.runner import NemesisRunner

__all__ = [
    "KINDS",
    "Control",
    "Fault",
    "FaultyLocation",
    "FullDiskBlob",
    "NemesisConfig",
    "NemesisReport",
    "NemesisRunner",
    "RunResult",
    "plan_faults",
]
