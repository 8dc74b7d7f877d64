"""COPY FROM of CSV files on local[2]: timeshard's ``copy_files`` vs Spark's CSV reader.

The input is generated once per run: ``--rows`` rows (default 10M) split
over ``--files`` CSV files (default 8) with a header and four columns, an
``id`` (int64), a ``name`` (string), an ``amount`` (double) and a ``ts``
(timestamp without a time zone, ``2024-01-01 00:00:00.000000``). Both
systems load that directory, in the same SparkSession
(:func:`timeshard.spark.spark_session`), ``--repeats`` times each (median
reported; the order alternates between repetitions):

* timeshard: :func:`timeshard.storage.copy_files` (``format="csv"``) into a
  new collection of an embedded location, created first with
  ``PersistClient.open_writer(name, schema)``. One Spark job; each task
  reads whole files with Python, decodes every row (a bad row would fail
  the COPY), writes one part; one compare-and-append;
* Spark: ``spark.read.csv(dir, header=True, schema=...)`` with the same
  columns given as a schema (no inference pass), ``.write.parquet(out)``.

Each run is checked (not timed): the COPY's report and a count of the
Parquet output must both say ``--rows`` rows. Prints a table with seconds,
rows/s, the ratio timeshard / Spark of rows/s (of the medians, and per
repetition: its two runs are adjacent, so they share the machine's load)
and the 1-minute load average before and after each run (the machine may
be shared), and writes bench/results/copy.json.

    .venv/bin/python bench/bench_copy.py --rows 10000000
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyspark
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.storage import CopyReport, copy_files

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("ts", pa.timestamp("us")),
    ]
)
SPARK_SCHEMA = "id BIGINT, name STRING, amount DOUBLE, ts TIMESTAMP_NTZ"
COLLECTION = "copied"
CHUNK_ROWS = 1_000_000
SYSTEMS = ("timeshard", "spark")


def generate(directory: Path, rows: int, files: int) -> int:
    """Write ``rows`` rows over ``files`` CSV files in ``directory``; their total bytes."""
    directory.mkdir(parents=True)
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    epoch = np.datetime64("2024-01-01T00:00:00", "us")
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds.tolist())):
        with pacsv.CSVWriter(directory / f"part-{i:03d}.csv", SCHEMA) as out:
            for start in range(lo, hi, CHUNK_ROWS):
                ids = np.arange(start, min(start + CHUNK_ROWS, hi), dtype=np.int64)
                names = pc.binary_join_element_wise(
                    "user-", pa.array((ids * 7919) % 100_003).cast(pa.string()), ""
                )
                out.write_table(
                    pa.table(
                        {
                            "id": ids,
                            "name": names,
                            "amount": (ids % 100_000) * 0.25,
                            "ts": epoch + (ids * 1_000_003).astype("timedelta64[us]"),
                        },
                        schema=SCHEMA,
                    )
                )
    return sum(f.stat().st_size for f in directory.iterdir())


def disk_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


def measured(fn: Callable[[], object]) -> dict[str, Any]:
    """Run ``fn``: its seconds and the 1-minute load average before and after it."""
    before = os.getloadavg()[0]
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "load1_before": before, "load1_after": os.getloadavg()[0]}


def timeshard_copy(spark: Any, inputs: Path, work: Path) -> dict[str, Any]:
    client = PersistClient(Location.embedded(work / "loc"))
    client.open_writer(COLLECTION, SCHEMA).expire()
    reports: list[CopyReport] = []
    result = measured(
        lambda: reports.append(copy_files(spark, client, str(inputs), COLLECTION, format="csv"))
    )
    result["rows"] = reports[0].rows
    result["err_rows"] = reports[0].err_rows
    result["attempts"] = reports[0].attempts
    result["disk_bytes"] = disk_bytes(work / "loc" / "blob")
    return result


def spark_copy(spark: Any, inputs: Path, work: Path) -> dict[str, Any]:
    out = work / "parquet"

    def run() -> None:
        df = spark.read.csv(str(inputs), header=True, schema=SPARK_SCHEMA, mode="FAILFAST")
        df.write.parquet(str(out))

    result = measured(run)
    result["rows"] = spark.read.parquet(str(out)).count()  # untimed
    result["disk_bytes"] = disk_bytes(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    console = Console(width=max(Console().width, 140))
    spark = spark_session(app_name="timeshard-bench-copy")
    tmp = Path(tempfile.mkdtemp(prefix="timeshard-bench-copy-"))
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    try:
        inputs = tmp / "csv"
        t0 = time.perf_counter()
        input_bytes = generate(inputs, args.rows, args.files)
        console.print(
            f"generated {args.rows:,} rows in {args.files} CSV files, "
            f"{input_bytes / 2**20:,.0f} MiB, in {time.perf_counter() - t0:.1f} s"
        )
        warm = spark.read.csv(str(inputs / "part-000.csv"), header=True, schema=SPARK_SCHEMA)
        warm.write.format("noop").mode("overwrite").save()
        for rep in range(args.repeats):
            order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
            for system in order:
                work = tmp / f"{system}-{rep}"
                fn = timeshard_copy if system == "timeshard" else spark_copy
                runs[system].append(fn(spark, inputs, work))
                console.print(f"rep {rep} {system}: {runs[system][-1]}")
                shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wrong = [
        f"{s} rep {i}: {r['rows']:,} rows"
        for s in SYSTEMS
        for i, r in enumerate(runs[s])
        if r["rows"] != args.rows or r.get("err_rows")
    ]
    median_s = {s: statistics.median(r["seconds"] for r in runs[s]) for s in SYSTEMS}
    rows_per_s = {s: args.rows / median_s[s] for s in SYSTEMS}
    ratio = rows_per_s["timeshard"] / rows_per_s["spark"]
    # Per repetition too: its two runs are adjacent, so they share the machine's load.
    per_repeat = [
        sp["seconds"] / ts["seconds"]
        for ts, sp in zip(runs["timeshard"], runs["spark"], strict=True)
    ]
    table = Table(
        "system",
        "s (median)",
        "rows/s",
        "ts / spark",
        "runs s",
        "load1 before->after",
        "out MiB",
        title=(
            f"COPY {args.rows:,} CSV rows, {args.files} files "
            f"({input_bytes / 2**20:,.0f} MiB), {spark.sparkContext.master}, "
            f"{os.cpu_count()} cores, median of {args.repeats}"
        ),
        caption="timeshard: copy_files(format='csv'); spark: spark.read.csv(schema) -> parquet",
    )
    for s in SYSTEMS:
        table.add_row(
            s,
            f"{median_s[s]:.2f}",
            f"{rows_per_s[s]:,.0f}",
            f"{ratio:.3f}x" if s == "timeshard" else "1.00x",
            " ".join(f"{r['seconds']:.1f}" for r in runs[s]),
            ", ".join(f"{r['load1_before']:.1f}->{r['load1_after']:.1f}" for r in runs[s]),
            f"{statistics.median(r['disk_bytes'] for r in runs[s]) / 2**20:,.0f}",
        )
    console.print(table)
    console.print(
        "timeshard / spark (rows/s) per repetition: "
        + " ".join(f"{r:.3f}x" for r in per_repeat)
        + f" (median {statistics.median(per_repeat):.3f}x)"
    )
    if wrong:
        console.print(f"[red]row counts differ from {args.rows:,}: {'; '.join(wrong)}[/red]")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "copy.json").write_text(
        json.dumps(
            {
                "rows": args.rows,
                "files": args.files,
                "input_bytes": input_bytes,
                "repeats": args.repeats,
                "master": spark.sparkContext.master,
                "cpu_count": os.cpu_count(),
                "versions": {"pyspark": pyspark.__version__, "pyarrow": pa.__version__},
                "runs": runs,
                "median_s": median_s,
                "rows_per_s": rows_per_s,
                "ratio_rows_per_s": ratio,
                "ratio_rows_per_s_per_repeat": per_repeat,
                "wrong_counts": wrong,
            },
            indent=2,
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
