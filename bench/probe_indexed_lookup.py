"""Probe: what would an arrangement lookup cost without a scan? (a design measurement)

A view tick reads the rows of the keys it touched from its inputs' arrangements
(:meth:`timeshard.compute.arranged_rows.KeyedRows.touched` and the join paths):
a hash join built on the touched keys, through which every row of every layer
streams. Its cost grows with the arrangement, not with the change, and it is
what keeps a view tick at 10M rows above 3x the tick at 100k (issue 13).

This script measures, on the same Spark session and the same rows, the
lookup as timeshard does it today against the floor of one alternative that
timeshard does not have: each hash partition of the arrangement kept as an
Arrow IPC file sorted by key (on the local disk, memory-mapped), and the
lookup a ``mapInArrow`` over the touched keys partitioned alike, each task
binary-searching its partition's file (``numpy.searchsorted``) and taking the
matching rows. Both run as one Spark job that counts and sums what it found,
so both pay a job's overhead; the files are written once, outside the timing.

Nothing in timeshard uses the second way: it answers whether such an index
is worth building (and the note of issue 13 reports the figures). What it
leaves out: the layers (one sorted file per layer and partition, merged as
the layers are), the files' place on a cluster (an executor reads only the
files of its own disk), and consolidation of the rows found.

    source scripts/bootstrap.sh
    python bench/probe_indexed_lookup.py --rows 1000000 --touched 100,10000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def write_index(state: Any, directory: Path) -> None:
    """Each partition of ``state`` as ``part-<p>.arrow``, sorted by ``k`` (one Spark job)."""
    import pyarrow as pa

    target = str(directory)

    def write(batches: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        table = pa.Table.from_batches(list(batches))
        part = TaskContext.get().partitionId()  # type: ignore[union-attr]
        if table.num_rows:
            table = table.take(pc.sort_indices(table, [("k", "ascending")]))
        path = f"{target}/part-{part}.arrow"
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, state_schema) as writer:
            writer.write_table(table.cast(state_schema))
        yield pa.RecordBatch.from_pydict({"rows": [table.num_rows]})

    state_schema = pa.schema([(f.name, _arrow_type(f.dataType)) for f in state.schema.fields])
    state.mapInArrow(write, "rows long").collect()


def _arrow_type(spark_type: Any) -> Any:
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType

    if isinstance(spark_type, LongType):
        return pa.int64()
    if isinstance(spark_type, StringType):
        return pa.string()
    raise TypeError(spark_type)


def indexed_lookup(touched: Any, directory: Path, schema: str) -> Any:
    """The rows of ``touched``'s keys, each task reading its partition's sorted file."""
    target = str(directory)

    def lookup(batches: Any) -> Any:
        import numpy as np
        import pyarrow as pa
        from pyspark import TaskContext

        keys = [b.column(0).to_numpy() for b in batches if b.num_rows]
        if not keys:
            return
        wanted = np.unique(np.concatenate(keys))
        part = TaskContext.get().partitionId()  # type: ignore[union-attr]
        with pa.memory_map(f"{target}/part-{part}.arrow") as source:
            table = pa.ipc.open_file(source).read_all()
            sorted_keys = table.column("k").to_numpy()
            # A key is at most once in a partition's file (the rows are consolidated).
            at = np.searchsorted(sorted_keys, wanted)
            found = at < len(sorted_keys)
            found[found] = sorted_keys[at[found]] == wanted[found]
            hit = at[found]
            if len(hit):
                yield from table.take(hit).to_batches()

    return touched.mapInArrow(lookup, schema)


def timed(action: Any, reps: int) -> tuple[float, Any]:
    """Median seconds of ``reps`` runs of ``action`` after one unmeasured run; its answer."""
    answer = action()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        again = action()
        times.append(time.perf_counter() - start)
        assert again == answer, (again, answer)
    return statistics.median(times), answer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--touched", default="100,10000", help="keys looked up, comma-separated")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=16, help="of the arrangement")
    parser.add_argument("--driver-memory", default="8g")
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from timeshard.spark import spark_session
    from timeshard.spark.checkpoint import local_checkpoint

    spark = spark_session(
        app_name="probe-indexed-lookup", extra_conf={"spark.driver.memory": args.driver_memory}
    )
    spark.sparkContext.setLogLevel("ERROR")
    n = args.rows
    rows = spark.range(n).select(
        ((F.col("id") * 2654435761) % n).alias("k"),
        (F.col("id") * 3).alias("v"),
        F.sha2(F.col("id").cast("string"), 256).substr(1, 16).alias("s"),
        F.lit(1).cast("long").alias("_ts"),
        F.lit(1).cast("long").alias("_diff"),
    )
    state = local_checkpoint(rows.repartition(args.partitions, "k"), eager=True)
    schema = "k long, v long, s string, _ts long, _diff long"
    found = F.count(F.lit(1)).alias("n"), F.sum("v").alias("sv")
    with tempfile.TemporaryDirectory(prefix="probe-index-") as tmp:
        directory = Path(tmp)
        start = time.perf_counter()
        write_index(state, directory)
        spent = time.perf_counter() - start
        print(f"{n:,} rows in {args.partitions} sorted Arrow files: {spent:.2f} s")
        for k in [int(t) for t in args.touched.split(",")]:
            stride = max(1, n // k)
            touched = local_checkpoint(
                spark.range(k)
                .select(((F.col("id") * stride) % n).alias("k"))
                .repartition(args.partitions, "k"),
                eager=True,
            )

            def semi_join(touched: Any = touched) -> Any:
                joined = state.join(touched.hint("shuffle_hash"), "k", "left_semi")
                return tuple(joined.agg(*found).collect()[0])

            def indexed(touched: Any = touched) -> Any:
                return tuple(indexed_lookup(touched, directory, schema).agg(*found).collect()[0])

            scan_s, scan_answer = timed(semi_join, args.reps)
            index_s, index_answer = timed(indexed, args.reps)
            assert scan_answer == index_answer, (scan_answer, index_answer)
            print(
                f"{n:,} rows, {k:,} keys looked up ({scan_answer[0]:,} rows found): "
                f"semi-join scan {scan_s * 1000:.0f} ms, "
                f"sorted-file lookup {index_s * 1000:.0f} ms (median of {args.reps})"
            )
    spark.stop()


if __name__ == "__main__":
    main()
