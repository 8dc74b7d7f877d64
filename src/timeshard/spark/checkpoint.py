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

``hashed_by=(column, n)`` also states the partitioning of rows that a
per-partition step computed from rows hash-partitioned by ``column`` into
``n`` partitions, without moving them again: a step that keeps each row's
``column`` and its partition (``mapInArrow`` over such rows, no coalesce)
leaves them where ``repartition(n, column)`` would put them, but Spark knows
no such thing of a Python step and would shuffle them once more to join
them with other rows partitioned so. The caller vouches for it; the
checkpoint checks the number of partitions.

Runs on the driver only (py4j calls, no job beyond the checkpoint's own).
"""

from __future__ import annotations

from typing import Any


def lost_checkpoint_blocks(error: BaseException) -> bool:
    """Whether a job failed because blocks of a local checkpoint are gone: they live on the
    executor that computed them, and go with it (an executor lost, decommissioned). Only
    rebuilding what was checkpointed mends that; retrying the same plan fails again."""
    seen: BaseException | None = error
    while seen is not None:
        texts = [str(seen)]
        java = getattr(seen, "java_exception", None)  # a Py4JJavaError: Spark's message
        for _ in range(8):
            if java is None:
                break
            texts.append(str(java.toString()))
            java = java.getCause()
        if any("CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND" in text for text in texts):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def local_checkpoint(df: Any, *, eager: bool, hashed_by: tuple[str, int] | None = None) -> Any:
    """``df.localCheckpoint(eager)``, with the origin plan's size estimate dropped (and
    ``hashed_by``'s partitioning stated: module doc)."""
    from pyspark.sql import DataFrame

    checkpointed = df.localCheckpoint(eager=eager)
    return DataFrame(forget_statistics(checkpointed, hashed_by), checkpointed.sparkSession)


def forget_statistics(checkpointed: Any, hashed_by: tuple[str, int] | None = None) -> Any:
    """The JVM Dataset of ``checkpointed`` (a local checkpoint), with no origin statistics."""
    from timeshard.spark.sqltext import jvm_static

    spark = checkpointed.sparkSession
    plan = checkpointed._jdf.queryExecution().logical()
    none = jvm_static(spark, "scala.Option", "empty")()
    partitioning = plan.outputPartitioning()
    if hashed_by is not None:
        partitioning = _hash_partitioning(spark._jvm, plan, *hashed_by)
    fresh = plan.copy(
        plan.output(),
        plan.rdd(),
        partitioning,
        plan.outputOrdering(),
        plan.isStreaming(),
        plan.stream(),
        spark._jsparkSession,
        none,  # originStats: Spark's default estimate for a relation it knows nothing of
        none,  # originConstraints: none are needed (the plan is a leaf of cached rows)
    )
    return jvm_static(spark, "org.apache.spark.sql.classic.Dataset", "ofRows")(
        spark._jsparkSession, fresh
    )


def _hash_partitioning(jvm: Any, plan: Any, column: str, n: int) -> Any:
    """Spark's ``HashPartitioning`` of ``plan``'s rows by its output ``column`` into ``n``."""
    partitions = plan.rdd().getNumPartitions()
    if partitions != n:
        raise AssertionError(f"{n} partitions by {column} stated, the rows have {partitions}")
    output = plan.output()
    attributes = [output.apply(i) for i in range(output.size())]
    [attribute] = [a for a in attributes if a.name() == column]
    exprs = jvm.java.util.ArrayList()
    exprs.add(attribute)
    seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq(exprs)
    return jvm.org.apache.spark.sql.catalyst.plans.physical.HashPartitioning(seq, n)
