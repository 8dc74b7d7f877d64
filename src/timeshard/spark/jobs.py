"""Counting Spark jobs: the unit of a tick's cost that tests can assert.

A tick's Spark job count is deterministic (it follows from the plan, not from
the machine's load), so tests assert it where a timing would be flaky. The
count is read from the DAG scheduler's job id counter, which every job of the
application takes one id from, on whichever thread submits it (the tick loop,
an I/O worker, a background merge). So a :class:`JobCounter` counts every
job the application ran between its start and its end: keep other Spark work
off the session while counting. :meth:`JobCounter.by_pool` splits them by
the fair-scheduler pool they ran in: a tick's own jobs run in the
``default`` pool, the upsert's background layer merges in ``timeshard-merge``.
:meth:`JobCounter.shuffled_records` sums the records they wrote to shuffles,
as deterministic as the count: a test asserts with it that a tick moves its
changes and never an arranged input. :meth:`JobCounter.spans` gives each
job's submission and completion times, so that a benchmark can split a
tick's wall time into the driver's planning before its first job, the jobs,
and the bookkeeping after them (timings: for benchmarks, never for tests).

Runs on the driver only.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any


def jobs_submitted(spark: Any) -> int:
    """How many Spark jobs this application has submitted so far (driver, no job)."""
    scheduler = spark.sparkContext._jsc.sc().dagScheduler()
    return int(scheduler.nextJobId())


class JobCounter:
    """Counts the Spark jobs submitted while it is entered.

    Enter it around the work (``with JobCounter(spark) as jobs:``) and read
    ``jobs.count`` afterwards: one ``spark.range(10).count()`` counts 1.
    """

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._start: int | None = None
        self._end: int | None = None

    def __enter__(self) -> JobCounter:
        self._start = jobs_submitted(self.spark)
        self._end = None
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end = jobs_submitted(self.spark)

    @property
    def count(self) -> int:
        """Jobs submitted so far (while entered) or in all (after exit)."""
        return len(self._jobs())

    def _jobs(self) -> range:
        """The ids of the jobs counted so far (while entered) or in all (after exit)."""
        assert self._start is not None, "JobCounter was never entered"
        end = self._end if self._end is not None else jobs_submitted(self.spark)
        return range(self._start, end)

    def by_pool(self) -> dict[str, int]:
        """The jobs counted, by scheduler pool (read once Spark's listener has seen them)."""
        pools: dict[str, int] = {}
        for stages in self._stages().values():
            pool = _pool_of(stages)
            pools[pool] = pools.get(pool, 0) + 1
        return pools

    def shuffled_records(self) -> int:
        """Records the counted jobs wrote to shuffles: how many rows they moved between
        partitions (deterministic, as the plan is)."""
        return sum(int(s.shuffleWriteRecords()) for ss in self._stages().values() for s in ss)

    def spans(self, pool: str | None = None) -> list[tuple[float, float]]:
        """Per counted job (of scheduler pool ``pool`` only, if given), in submission order:
        when it was submitted and when it completed, in seconds since the epoch
        (``time.time()``'s clock; Spark's listener stamps them in milliseconds). Read after
        the jobs are done: a job not yet completed is left out."""
        store = self.spark.sparkContext._jsc.sc().statusStore()
        out = []
        for job, stages in self._stages().items():
            if pool is not None and _pool_of(stages) != pool:
                continue
            data = store.job(job)
            submitted, completed = data.submissionTime(), data.completionTime()
            if submitted.isDefined() and completed.isDefined():
                out.append((submitted.get().getTime() / 1000, completed.get().getTime() / 1000))
        return sorted(out)

    def _stages(self) -> dict[int, list[Any]]:
        """Per counted job, the stages it ran (not skipped), from Spark's status store once
        its listener has seen them."""
        context = self.spark.sparkContext._jsc.sc()
        context.listenerBus().waitUntilEmpty()
        store = context.statusStore()
        out: dict[int, list[Any]] = {}
        for job in self._jobs():
            ids = store.job(job).stageIds()
            attempts = [store.lastStageAttempt(ids.apply(i)) for i in range(ids.size())]
            out[job] = [s for s in attempts if str(s.status()) != "SKIPPED"]
        return out


def _pool_of(stages: list[Any]) -> str:
    """The scheduler pool a job ran in, from its stages (``default`` if it ran none)."""
    return str(stages[0].schedulingPool()) if stages else "default"


__all__ = ["JobCounter", "jobs_submitted"]
