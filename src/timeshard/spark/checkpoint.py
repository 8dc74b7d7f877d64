"""Local checkpoints whose size estimate does not compound from tick to tick.

Spark keeps, on a checkpointed DataFrame, the statistics its optimizer
estimated for the plan it was computed from. Without column statistics, the
estimate of a join is the *product* of its inputs' estimates. An arranged
layer is computed by joining the tick's changes with earlier layers, and a
merge joins two layers: each layer's estimate then multiplies those of the
layers before it, and the number of digits of that ``BigInt`` grows with
every tick and doubles with every merge. Planning a tick multiplies those
numbers, many times over (the runtime-filter and join-selection rules ask
for them): a long-running process (``timeshard serve``) was seen spending a
minute of JVM CPU per tick in ``BigInteger.multiply``, and its source fell
ever further behind.

:func:`local_checkpoint` checkpoints as Spark does, and then forgets the
inherited estimate: a layer is estimated as Spark estimates any relation it
knows nothing of (``spark.sql.defaultSizeInBytes``), as the first tick's was.
The plan, its partitioning and its cached blocks are unchanged.

Runs on the driver only (py4j calls, no job beyond the checkpoint's own).
"""

from __future__ import annotations

from typing import Any


def local_checkpoint(df: Any, *, eager: bool) -> Any:
    """``df.localCheckpoint(eager)``, with the origin plan's size estimate dropped."""
    from pyspark.sql import DataFrame

    checkpointed = df.localCheckpoint(eager=eager)
    return DataFrame(forget_statistics(checkpointed), checkpointed.sparkSession)


def forget_statistics(checkpointed: Any) -> Any:
    """The JVM Dataset of ``checkpointed`` (a local checkpoint), with no origin statistics."""
    spark = checkpointed.sparkSession
    jvm = spark._jvm
    plan = checkpointed._jdf.queryExecution().logical()
    none = jvm.scala.Option.empty()
    fresh = plan.copy(
        plan.output(),
        plan.rdd(),
        plan.outputPartitioning(),
        plan.outputOrdering(),
        plan.isStreaming(),
        plan.stream(),
        spark._jsparkSession,
        none,  # originStats: Spark's default estimate for a relation it knows nothing of
        none,  # originConstraints: none are needed (the plan is a leaf of cached rows)
    )
    return jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, fresh)
