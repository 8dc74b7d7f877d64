"""Faults injected into the Spark tasks that write and read parts (the nemesis).

:func:`inject_task_faults` installs, on the driver, a source of
:class:`~timeshard.location.unreliable.KeyedFaults`; every ``write_parts`` and
``read_parts`` call takes a fresh one from it (:func:`current_task_faults`,
driver) and hands it to its tasks (:mod:`timeshard.spark.parts`, "Injected
faults"). In the tasks (executors) each draws once by its partition and
attempt number (:func:`task_attempt`): a write task in
:func:`~timeshard.spark.part_writer.write_task_part`, a read task in
:class:`PartReadFaults`, the pass-through ``mapInArrow`` behind the Parquet scan,
which holds plain values only, so it pickles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from timeshard.location.unreliable import KeyedFaults

_task_faults: Callable[[], KeyedFaults | None] | None = None


def inject_task_faults(source: Callable[[], KeyedFaults | None] | None) -> None:
    """Make the tasks of later writes and reads inject faults (driver; see the module doc).

    ``source`` is asked once per ``write_parts``/``read_parts`` call and gives
    the faults for that call's tasks, or None for none; ``None`` removes it.
    """
    global _task_faults
    _task_faults = source


def current_task_faults() -> KeyedFaults | None:
    return None if _task_faults is None else _task_faults()


def task_attempt() -> tuple[int, int]:
    """(partition, attempt number) of the running Spark task; (0, 0) outside one."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, 0
    return context.partitionId(), context.attemptNumber()


@dataclass(frozen=True, slots=True)
class PartReadFaults:
    """What a read task runs behind the Parquet scan when faults are injected (executors).

    Draws once by partition and attempt; fails the task before it yields a
    row, or passes the batches through unchanged.
    """

    faults: KeyedFaults

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, attempt = task_attempt()
        fault = self.faults.draw(f"read:{partition}:{attempt}")
        if fault != "ok":
            self.faults.fail(f"task_read.{fault}", f"a read of parts (partition {partition})")
        yield from batches


__all__ = ["PartReadFaults", "current_task_faults", "inject_task_faults", "task_attempt"]
