"""The engine's cancel of a statement's Spark jobs, against a recording SparkContext.

Spark cancels the jobs of a tag that run, not those that start later, so a
canceled statement's jobs are canceled again until it ends
(:meth:`~timeshard.server.engine.Engine.cancel`). A connection's statements
share one job tag: a repeat that reached Spark after the statement ended
canceled the next statement's job, which then failed with Spark's "Job
cancelled" (XX000) although no one canceled it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.server.engine import Engine

DEADLINE_S = 60.0  # a stuck engine never gets there; a slow one well within


class Recording:
    """The SparkContext calls :meth:`Engine.cancellable` and :meth:`Engine.cancel` make, in
    order; the second cancel of the tag (the first repeat) waits for ``release``."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.cancels = 0
        self.repeating = threading.Event()
        self.release = threading.Event()

    def _log(self, call: str) -> None:
        with self.lock:
            self.calls.append(call)

    def getLocalProperty(self, key: str) -> str | None:  # PySpark's names, as it spells them
        return None

    def setLocalProperty(self, key: str, value: Any) -> None:
        pass

    def setInterruptOnCancel(self, value: bool) -> None:
        pass

    def addJobTag(self, tag: str) -> None:
        self._log("add")

    def removeJobTag(self, tag: str) -> None:
        self._log("remove")

    def cancelJobsWithTag(self, tag: str) -> None:
        with self.lock:
            self.cancels += 1
            repeat = self.cancels == 2
        if repeat:
            self._log("repeat begun")
            self.repeating.set()
            assert self.release.wait(DEADLINE_S)
            self._log("repeat done")
        else:
            self._log("cancel")


def test_a_repeated_cancel_begun_before_the_statement_ended_reaches_spark_before_its_end(
    tmp_path: Path,
) -> None:
    context = Recording()
    spark = SimpleNamespace(sparkContext=context)
    engine = Engine(spark, PersistClient(Location.embedded(tmp_path / "loc")), follow_s=3600)
    with engine.cancellable("conn"):
        engine.cancel("conn")
        assert context.repeating.wait(DEADLINE_S), "the jobs were never canceled again"
        # The statement ends while the repeat is on its way to Spark: the end waits for it.
        threading.Timer(0.2, context.release.set).start()
    assert context.calls[:3] == ["add", "cancel", "repeat begun"]
    assert context.calls[3:] == ["repeat done", "remove"], context.calls
    count = context.cancels
    threading.Event().wait(0.5)  # no repeat after the end, whatever comes next
    assert context.cancels == count


def test_a_cancel_of_no_running_statement_starts_no_repeat(tmp_path: Path) -> None:
    context = Recording()
    engine = Engine(
        SimpleNamespace(sparkContext=context),
        PersistClient(Location.embedded(tmp_path / "loc")),
        follow_s=3600,
    )
    engine.cancel("conn")  # a CancelRequest that came after the statement ended
    assert context.calls == ["cancel"]
    assert not any(t.name.startswith("timeshard-cancel-") for t in threading.enumerate())
