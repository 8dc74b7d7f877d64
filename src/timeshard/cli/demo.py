"""``timeshard demo``: persist on Spark, end to end, on the embedded default.

The demo keeps a shard of orders. Each tick, Spark tasks write a batch of new
orders plus corrections of the previous tick's orders (a retraction of the old
amount and an insertion of the new one) straight into the blob directory as
Parquet parts; the driver appends the batch with compare-and-append. Then the
shard is compacted and garbage-collected, and every tick's time is read back
with Spark and compared with a from-scratch computation of what the orders
were at that time. The exit code is 0 only if every time matched.

Runs on the driver; the part writes and snapshot reads run in Spark tasks.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from timeshard.location import Location
from timeshard.persist import Appended, PersistClient

SCHEMA = pa.schema([("order_id", pa.int64()), ("customer", pa.string()), ("amount", pa.float64())])
SHARD = "demo_orders"


def _tick_sql(tick: int, rows: int, ts: int) -> str:
    """Spark SQL for the updates of one tick (every value is an int we made)."""
    start, fix = tick * rows, max(rows // 10, 1)
    inserts = (
        f"SELECT id AS order_id, concat('c', id % 97) AS customer, "
        f"CAST((id * 7) % 1000 AS DOUBLE) / 10 AS amount, {ts} AS _ts, 1 AS _diff "
        f"FROM range({start}, {start + rows})"
    )
    if tick == 0:
        return inserts
    prev = (tick - 1) * rows
    retract = (
        f"SELECT id, concat('c', id % 97), CAST((id * 7) % 1000 AS DOUBLE) / 10, "
        f"{ts}, -1 FROM range({prev}, {prev + fix})"
    )
    correct = (
        f"SELECT id, concat('c', id % 97), CAST((id * 7) % 1000 AS DOUBLE) / 10 + 1, "
        f"{ts}, 1 FROM range({prev}, {prev + fix})"
    )
    return f"{inserts} UNION ALL {retract} UNION ALL {correct}"


def _desired_sql(tick: int, rows: int) -> str:
    """The orders as they are after ``tick``, computed from scratch."""
    fix = max(rows // 10, 1)
    return (
        f"SELECT id AS order_id, concat('c', id % 97) AS customer, "
        f"CAST((id * 7) % 1000 AS DOUBLE) / 10 + "
        f"CASE WHEN id DIV {rows} < {tick} AND id % {rows} < {fix} THEN 1 ELSE 0 END "
        f"AS amount FROM range(0, {(tick + 1) * rows})"
    )


def run_demo(location_dir: Path, rows: int, ticks: int, console: Console) -> int:
    from timeshard.spark import snapshot_df, spark_session

    if location_dir.exists():
        shutil.rmtree(location_dir)
    location = Location.embedded(location_dir)
    console.print(f"[bold]timeshard demo[/bold]: location {location.describe()}")
    started = time.monotonic()
    spark = spark_session(app_name="timeshard-demo")
    console.print(
        f"Spark {spark.version} on {spark.sparkContext.master} "
        f"(started in {time.monotonic() - started:.1f} s)"
    )
    client = PersistClient(location)
    writer, reader = client.open(SHARD, SCHEMA)
    times: list[int] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("writing ticks", total=ticks, info="")
        for tick in range(ticks):
            lower = writer.fetch_recent_upper().time
            assert lower is not None
            ts = max(int(time.time() * 1000), lower)
            t0 = time.monotonic()
            batch = writer.batch(spark.sql(_tick_sql(tick, rows, ts)), lower, ts + 1)
            result = writer.compare_and_append_batch([batch], lower, ts + 1)
            assert isinstance(result, Appended), result
            times.append(ts)
            progress.update(
                task,
                advance=1,
                info=f"tick {tick}: {batch.num_rows} updates in "
                f"{len(batch.parts)} parts, {time.monotonic() - t0:.2f} s",
            )
    state = client.state(SHARD)
    console.print(
        f"appended {ticks} ticks: {len(state.batches)} batches, {state.num_rows()} stored updates"
    )
    merges = writer.compact()
    reader.downgrade_since(times[0])
    report = client.gc(SHARD)
    state = client.state(SHARD)
    console.print(
        f"compaction: {merges} merges -> {len(state.batches)} batches, "
        f"{state.num_rows()} updates; GC deleted {report.deleted_blobs} blobs"
    )

    table = Table(
        "tick",
        "as of",
        "orders",
        "total amount",
        "matches recomputation",
        title=f"{SHARD} read back with Spark at every tick",
    )
    ok = True
    for tick, ts in enumerate(times):
        snap = snapshot_df(spark, reader, ts).drop("_ts", "_err")
        expanded = snap.selectExpr(
            "order_id", "customer", "amount", "explode(sequence(1, CAST(_diff AS INT))) AS _n"
        ).drop("_n")
        desired = spark.sql(_desired_sql(tick, rows))
        same = expanded.exceptAll(desired).isEmpty() and desired.exceptAll(expanded).isEmpty()
        ok = ok and same
        agg = expanded.selectExpr("count(*) AS n", "round(sum(amount), 1) AS s").first()
        assert agg is not None
        table.add_row(
            str(tick),
            str(ts),
            str(agg["n"]),
            str(agg["s"]),
            "[green]yes[/green]" if same else "[red]NO[/red]",
        )
    console.print(table)
    console.print(
        f"listen: changes after the first tick -> {len(_listened(reader, times[0]))} update rows"
    )
    console.print("[green]consistent at every time[/green]" if ok else "[red]INCONSISTENT[/red]")
    console.print(f"inspect it: timeshard shard inspect {SHARD} --location {location_dir}")
    writer.expire()
    reader.expire()
    spark.stop()
    return 0 if ok else 1


def _listened(reader: object, as_of: int) -> list[dict[str, object]]:
    from timeshard.persist import ReadHandle, Updates

    assert isinstance(reader, ReadHandle)
    listen = reader.listen(as_of)
    rows: list[dict[str, object]] = []
    for event in listen.poll():
        if isinstance(event, Updates):
            rows += event.table.to_pylist()
    listen.expire()
    return rows


__all__ = ["run_demo"]
