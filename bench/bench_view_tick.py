"""Per-tick cost of materialized views against a from-scratch evaluation (issue 13).

Two input shards, each of ``--rows`` rows:

* ``inp (k, g, v)``: ``k`` in ``[0, rows)``, ``g = k % --groups``, ``v = k``;
* ``side (k, x)``: ``k`` in ``[0, rows)``, ``x = k % 1000``.

The views (``--views``, all by default), each in the incremental class of
issue 13:

* ``linear``: ``SELECT k, v * 2 AS w FROM inp WHERE v % 2 = 0``;
* ``group_sum``: ``SELECT g, count(*) AS n, sum(v) AS s FROM inp GROUP BY g``;
* ``group_minmax``: ``SELECT g, min(v) AS lo, max(v) AS hi FROM inp GROUP BY g``;
* ``join``: ``SELECT a.k, a.v, b.x FROM inp a JOIN side b ON a.k = b.k``;
* ``join3``: ``join`` and ``JOIN side c ON c.k = a.v`` (three arrangements:
  ``inp`` by ``k`` and by ``v``, ``side`` by ``k``).

Each data tick changes ``--change`` of the rows of both inputs (a
retraction and a re-insertion with ``v + 1``, ``x + 1``; tick ``i`` changes
the keys ``f + [(i - 1) c, i c)``, so no key changes twice; ``f`` is
``--change-from`` times the rows, 0 by default: the first ``--groups`` keys
are the rows of every group's min, whose retraction makes ``group_minmax``
recompute the group from its rows; at 0.5 no change retracts an extreme),
appends both at
one time, and then, view after view, times the view's sink from that point
until the view's shard reaches the new time (``MaterializedView.catch_up``),
counting the Spark jobs it submits (:class:`timeshard.spark.jobs.JobCounter`,
which counts every job of the application, on any thread: keep the machine
otherwise idle), split by scheduler pool: the tick's own (``default``) and
the background merges of the arrangements' layers (``timeshard-merge``),
which share the cores with the tick but are off its path. The peer, in the
same tick: the same query evaluated from scratch over the inputs' snapshots
at that time, written as Parquet.
The views run in one process, so views that arrange an input by the same key
share the arrangement (``join`` and ``join3``: ``inp`` by ``k``, ``side`` by
``k``; the view that ticks second reads the layers the first one pushed):
reported, the arrangements over the views, the distinct ones, and the bytes
their layers cache in Spark.
``--warmup N`` runs ``N`` data ticks first, the same way, and leaves them out
of the medians (both the sink's and the from-scratch evaluation's; they are
kept in the JSON as ``warmup_ticks``). Spark's analyzer and optimizer run
interpreted or C1-compiled in a new JVM: one DataFrame operation cost 10 ms
over its first tens of calls and 2.5 ms after 1,500 here, and a view tick
plans many. The first ticks of a process measure that; a long-running view
ticks in the steady state.
Reported per view: median sink latency, split in three (the driver's
planning before the tick's first job, the jobs, and the bookkeeping after
them: ``timed_catch_up``), Spark jobs per tick, the from-scratch
time and the ratio sink / from scratch. Then ``--idle`` ticks with no input
change (an empty append to both inputs): per view the Spark jobs and the
parts written per idle tick.

``--scaling 100000,10000000`` instead runs the data ticks once per input
size, with the same number of changed rows at every size
(``--change-rows``, default 1,000), after an unreported warm-up run at a
small size, and reports the ratio of the per-tick
sink latencies (the largest size over the smallest; goal <= 3x) and of the
from-scratch times.

Every mode ends with the goals of issue 13 and "met" / "not met". Writes
``bench/results/view_tick_change<fraction>.json`` or
``bench/results/view_tick_scaling.json`` (``view_tick_scaling_<views>.json`` for a
run of some ``--views``: run each view alone to measure it without the memory the
other views' arrangements hold in the same JVM).

    source scripts/bootstrap.sh
    python bench/bench_view_tick.py --rows 1000000 --change 0.01 --ticks 5
    python bench/bench_view_tick.py --rows 1000000 --change 0.01 --warmup 30 --ticks 10
    python bench/bench_view_tick.py --rows 1000000 --change 0.0001 --ticks 5
    python bench/bench_view_tick.py --scaling 100000,10000000 --change-rows 1000 --ticks 3
    python bench/bench_view_tick.py --scaling 100000,10000000 --change-rows 1000 \
        --ticks 5 --warmup 5 --views join3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench" / "compare"))

import report

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import snapshot_df, spark_session
from timeshard.spark.jobs import JobCounter

INP = pa.schema([("k", pa.int64()), ("g", pa.int64()), ("v", pa.int64())])
SIDE = pa.schema([("k", pa.int64()), ("x", pa.int64())])
# name -> (inputs the SQL names, SQL)
VIEWS: dict[str, tuple[tuple[str, ...], str]] = {
    "linear": (("inp",), "SELECT k, v * 2 AS w FROM inp WHERE v % 2 = 0"),
    "group_sum": (("inp",), "SELECT g, count(*) AS n, sum(v) AS s FROM inp GROUP BY g"),
    "group_minmax": (("inp",), "SELECT g, min(v) AS lo, max(v) AS hi FROM inp GROUP BY g"),
    "join": (("inp", "side"), "SELECT a.k, a.v, b.x FROM inp a JOIN side b ON a.k = b.k"),
    "join3": (
        ("inp", "side"),
        "SELECT a.k, a.v, b.x, c.x AS x2 FROM inp a JOIN side b ON a.k = b.k "
        "JOIN side c ON c.k = a.v",
    ),
}
# A data tick's seconds, split (timed_catch_up): before its first job, in its jobs, after.
PHASES = ("plan_s", "jobs_s", "after_s")
# The goal of issue 13 for a view tick against a from-scratch evaluation, per change fraction.
RATIO_GOALS = {0.01: 0.2, 0.0001: 0.05}
SPEC_ROWS = 1_000_000
MAX_JOBS_DATA_TICK = 2
MAX_SCALING = 3.0


class Inputs:
    """The two input shards, their writers and readers, and the ticks that change them."""

    def __init__(
        self, spark: Any, client: PersistClient, rows: int, groups: int, first: int = 0
    ) -> None:
        self.spark, self.rows, self.groups, self.first = spark, rows, groups, first
        self.handles = {"inp": client.open("inp", INP), "side": client.open("side", SIDE)}
        self.time = 0
        parts = max(2, min(64, rows // 250_000))
        for name, old, _new in self._rows():
            self.handles[name][0].append(
                spark.sql(
                    f"SELECT {old}, 0L AS _ts, 1L AS _diff FROM range(0, {rows}, 1, {parts})"
                ),
                0,
                1,
            )
        self.time = 1

    def _rows(self) -> list[tuple[str, str, str]]:
        """Per input, the SELECT list of a key's row before and after its change."""
        g = f"id % {self.groups} AS g"
        return [
            ("inp", f"id AS k, {g}, id AS v", f"id AS k, {g}, id + 1 AS v"),
            ("side", "id AS k, id % 1000 AS x", "id AS k, id % 1000 + 1 AS x"),
        ]

    def change(self, tick: int, change: int) -> None:
        """Tick ``tick`` (from 1): keys ``first + [(tick - 1) change, tick change)`` get new
        values."""
        lo, hi = self.first + (tick - 1) * change, self.first + tick * change
        assert hi <= self.rows, f"tick {tick} of {change} rows passes the {self.rows} rows"
        t = self.time
        for name, old, new in self._rows():
            retract = f"SELECT {old}, {t}L AS _ts, -1L AS _diff FROM range({lo}, {hi}, 1, 2)"
            insert = f"SELECT {new}, {t}L AS _ts, 1L AS _diff FROM range({lo}, {hi}, 1, 2)"
            self.handles[name][0].append(self.spark.sql(f"{retract} UNION ALL {insert}"), t, t + 1)
        self.time += 1

    def idle(self) -> None:
        """A tick with no change: an empty append to both inputs."""
        for writer, _reader in self.handles.values():
            writer.append([], self.time, self.time + 1)
        self.time += 1

    def from_scratch(self, name: str, out: Path) -> float:
        """Seconds to evaluate view ``name`` from scratch at the last time, written as Parquet."""
        t0 = time.perf_counter()
        names, sql = VIEWS[name]
        for n in names:
            snap = snapshot_df(self.spark, self.handles[n][1], self.time - 1)
            cols = [f.name for f in (INP if n == "inp" else SIDE)]
            expanded = snap.selectExpr(*cols, "explode(sequence(1, CAST(_diff AS INT))) AS _n")
            expanded.drop("_n").createOrReplaceTempView(n)
        self.spark.sql(sql).write.mode("overwrite").parquet(str(out))
        return time.perf_counter() - t0


def install(spark: Any, client: PersistClient, name: str) -> MaterializedView:
    names, sql = VIEWS[name]
    view = MaterializedView.install(
        spark, client, ViewDefinition(name, {n: n for n in names}, sql), as_of=0
    )
    view.catch_up()
    return view


def timed_catch_up(spark: Any, view: MaterializedView) -> dict[str, Any]:
    """Catch ``view`` up to its inputs: seconds, Spark jobs, rows and parts written.

    The seconds are split by the tick's own jobs (pool ``default``), from
    Spark's status store: ``plan_s`` before the first is submitted (the
    driver reads the shards' state and plans), ``jobs_s`` from then until the
    last completes (including any planning between them), ``after_s`` from
    then on (the compare-and-append and holds). A tick with no job is all
    ``plan_s``. ``gc_s``: the JVM's garbage collection pauses meanwhile, those
    :func:`jvm_gc_s` counts (any thread: in local mode the tasks' too), which a
    large input's cached state and the peer's evaluation in the same JVM can make
    a tick wait for.
    """
    rows, parts = view.stats.rows_written, view.stats.parts_written
    gc_before = jvm_gc_s(spark)
    with JobCounter(spark) as jobs:
        start = time.time()
        t0 = time.perf_counter()
        view.catch_up()
        sink_s = time.perf_counter() - t0
        end = time.time()
    gc_s = jvm_gc_s(spark) - gc_before
    pools = jobs.by_pool()
    spans = jobs.spans("default")
    first = spans[0][0] if spans else end
    last = max((c for _s, c in spans), default=end)
    return {
        "sink_s": sink_s,
        "plan_s": max(first - start, 0.0),
        "jobs_s": max(last - first, 0.0),
        "after_s": max(end - last, 0.0),
        "gc_s": gc_s,
        "jobs": pools.pop("default", 0),
        "background_jobs": sum(pools.values()),
        "rows_written": view.stats.rows_written - rows,
        "parts_written": view.stats.parts_written - parts,
    }


def jvm_gc_s(spark: Any) -> float:
    """Seconds the JVM (driver and, in local mode, executors) has spent in garbage
    collection pauses that its collector beans count.

    On Java 17 with G1 those are the young pauses (a concurrent cycle's start
    included) and full collections. G1's remark and cleanup pauses are in no
    bean before Java 20 (checked with ``-Xlog:gc``: of 28 young, 1 full, 3 remark
    and 3 cleanup pauses, the beans counted 28 and 1), nor is its concurrent
    marking, which runs beside the tasks and takes their CPU. So a tick that
    starts a concurrent cycle can show ``gc`` 0.00 s while a JFR recording shows
    pauses.
    """
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    return sum(max(int(beans.get(i).getCollectionTime()), 0) for i in range(beans.size())) / 1000


def matches_scratch(spark: Any, client: PersistClient, name: str, t: int, scratch: Path) -> bool:
    """Whether view ``name``'s shard at ``t`` equals the from-scratch result in ``scratch``."""
    reader = client.open_leased_reader(name)
    try:
        snap = snapshot_df(spark, reader, t)
        cols = [c for c in snap.columns if not c.startswith("_")]
        view = snap.selectExpr(*cols, "explode(sequence(1, CAST(_diff AS INT))) AS _n").drop("_n")
        expected = spark.read.parquet(str(scratch)).select(*cols)
        return view.exceptAll(expected).isEmpty() and expected.exceptAll(view).isEmpty()
    finally:
        reader.expire()


def shared_arrangements(views: dict[str, MaterializedView]) -> dict[str, Any]:
    """How many arrangements the views read (each its own), how many distinct ones they
    share, and the bytes the distinct ones' layers hold in Spark."""
    every = [a for v in views.values() for a in v.desired.arrangements()]
    distinct = {id(a): a for a in every}.values()
    return {
        "per_view": len(every),
        "distinct": len(distinct),
        "cached_bytes": sum(layer.size for a in distinct for layer in a.layers),
    }


def run_size(
    spark: Any, args: argparse.Namespace, rows: int, change: int, idle: int
) -> dict[str, Any]:
    """Hydrate every view over ``rows`` input rows, then data ticks and idle ticks."""
    tmp = Path(tempfile.mkdtemp(prefix="timeshard-bench-view-"))
    console = Console()
    try:
        client = PersistClient(Location.embedded(tmp / "loc"))
        t0 = time.perf_counter()
        inputs = Inputs(spark, client, rows, args.groups, round(rows * args.change_from))
        load_s = time.perf_counter() - t0
        views: dict[str, MaterializedView] = {}
        hydrate: dict[str, float] = {}
        for name in args.views:
            t0 = time.perf_counter()
            views[name] = install(spark, client, name)
            hydrate[name] = time.perf_counter() - t0
        ticks: dict[str, list[dict[str, Any]]] = {name: [] for name in views}
        warm: dict[str, list[dict[str, Any]]] = {name: [] for name in views}
        for tick in range(1, args.warmup + args.ticks + 1):
            inputs.change(tick, change)
            warming = tick <= args.warmup
            into = warm if warming else ticks
            for name, view in views.items():
                t = timed_catch_up(spark, view)
                t["scratch_s"] = inputs.from_scratch(name, tmp / "scratch" / name)
                t["tick"] = tick
                into[name].append(t)
            console.print(
                f"rows {rows:,} {'warm-up ' if warming else ''}tick {tick}: "
                + ", ".join(
                    f"{n} {ts[-1]['sink_s']:.2f} s / {ts[-1]['jobs']} jobs / "
                    f"gc {ts[-1]['gc_s']:.2f} s "
                    f"(scratch {ts[-1]['scratch_s']:.2f} s)"
                    for n, ts in into.items()
                )
            )
        last = inputs.time - 1
        checks = {n: matches_scratch(spark, client, n, last, tmp / "scratch" / n) for n in views}
        shared = shared_arrangements(views)
        idle_ticks: dict[str, list[dict[str, Any]]] = {name: [] for name in views}
        for _ in range(idle):
            inputs.idle()
            for name, view in views.items():
                idle_ticks[name].append(timed_catch_up(spark, view))
        for view in views.values():
            view.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out: dict[str, Any] = {"rows": rows, "change_rows": change, "load_s": load_s, "views": {}}
    out["arrangements"] = shared
    console.print(
        f"arrangements: {shared['per_view']} over the views, {shared['distinct']} distinct "
        f"(shared between views), {shared['cached_bytes'] / 2**20:.1f} MiB cached"
    )
    for name in views:
        ts = ticks[name]
        sink = statistics.median(t["sink_s"] for t in ts)
        scratch = statistics.median(t["scratch_s"] for t in ts)
        out["views"][name] = {
            "sql": VIEWS[name][1],
            "matches_scratch": checks[name],
            "hydrate_s": hydrate[name],
            "warmup_ticks": warm[name],
            "ticks": ts,
            "median_sink_s": sink,
            "median_scratch_s": scratch,
            **{f"median_{k}": statistics.median(t[k] for t in ts) for k in (*PHASES, "gc_s")},
            "ratio": sink / scratch,
            "max_jobs": max(t["jobs"] for t in ts),
            "median_jobs": statistics.median(t["jobs"] for t in ts),
            "background_jobs": sum(t["background_jobs"] for t in ts),
            "idle_ticks": idle_ticks[name],
            "idle_median_s": (
                statistics.median(t["sink_s"] for t in idle_ticks[name])
                if idle_ticks[name]
                else None
            ),
            "idle_max_jobs": max((t["jobs"] for t in idle_ticks[name]), default=None),
            "idle_parts": sum(t["parts_written"] for t in idle_ticks[name]),
        }
    return out


def print_size(run: dict[str, Any], idle: int) -> None:
    console = Console(width=max(Console().width, 140))
    table = Table(
        "view",
        "hydrate s",
        "sink median s",
        "before jobs / in jobs / after s",
        "jobs/tick (median, max)",
        "merge jobs",
        "rows written/tick",
        "parts/tick",
        "from scratch s",
        "sink / scratch",
        title=f"view ticks over {run['rows']:,} rows, {run['change_rows']:,} rows of each input "
        f"changed per tick (input load {run['load_s']:.1f} s)",
    )
    for name, v in run["views"].items():
        table.add_row(
            name,
            f"{v['hydrate_s']:.1f}",
            f"{v['median_sink_s']:.2f}",
            " / ".join(f"{v[f'median_{k}']:.2f}" for k in PHASES),
            f"{v['median_jobs']:g}, {v['max_jobs']}",
            str(v["background_jobs"]),
            f"{statistics.median(t['rows_written'] for t in v['ticks']):,.0f}",
            f"{statistics.median(t['parts_written'] for t in v['ticks']):g}",
            f"{v['median_scratch_s']:.2f}",
            f"{v['ratio']:.2f}x",
        )
    console.print(table)
    if idle:
        table = Table(
            "view",
            "idle tick median s",
            "jobs/idle tick (max)",
            "parts written while idle",
            title=f"{idle} idle ticks (no input change)",
        )
        for name, v in run["views"].items():
            table.add_row(
                name, f"{v['idle_median_s']:.2f}", str(v["idle_max_jobs"]), str(v["idle_parts"])
            )
        console.print(table)


def goals_of_size(run: dict[str, Any], change: float | None) -> list[dict[str, Any]]:
    out = []
    target = RATIO_GOALS.get(change) if change is not None else None
    for name, v in run["views"].items():
        out.append(
            {
                "goal": f"{name}: the view = from scratch after the last data tick",
                "target": "equal",
                "measured": "equal" if v["matches_scratch"] else "DIFFERENT",
                "value": None,
                "met": v["matches_scratch"],
                "spec_size": True,
            }
        )
        if target is not None:
            out.append(
                report.goal(
                    f"{name}: sink / from scratch at {change:.2%} change",
                    v["ratio"],
                    target,
                    at_most=True,
                    spec_size=run["rows"] == SPEC_ROWS,
                )
            )
        out.append(
            report.goal(
                f"{name}: Spark jobs per data tick (max)",
                v["max_jobs"],
                MAX_JOBS_DATA_TICK,
                at_most=True,
                unit="",
                fmt="{:.0f}",
            )
        )
        if v["idle_ticks"]:
            out.append(
                report.goal(
                    f"{name}: Spark jobs per idle tick (max)",
                    v["idle_max_jobs"],
                    0,
                    at_most=True,
                    unit="",
                    fmt="{:.0f}",
                )
            )
            out.append(
                report.goal(
                    f"{name}: parts written while idle",
                    v["idle_parts"],
                    0,
                    at_most=True,
                    unit="",
                    fmt="{:.0f}",
                )
            )
    return out


def scaling(spark: Any, args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    # The JVM's first ticks are slow: warm up at a small size, unreported, first.
    warm = argparse.Namespace(**vars(args) | {"ticks": 2})
    run_size(spark, warm, max(10_000, 2 * args.change_rows), args.change_rows, 0)
    runs = [run_size(spark, args, rows, args.change_rows, 0) for rows in sizes]
    for r in runs:
        print_size(r, 0)
    small, large = runs[0], runs[-1]
    console = Console(width=max(Console().width, 140))
    table = Table(
        "view",
        *(f"sink s @ {r['rows']:,}" for r in runs),
        "sink ratio",
        *(f"scratch s @ {r['rows']:,}" for r in runs),
        "scratch ratio",
        title=f"scaling: {args.change_rows:,} changed rows per tick, "
        f"{large['rows']:,} rows against {small['rows']:,}",
    )
    ratios: dict[str, dict[str, float]] = {}
    for name in small["views"]:
        s, lg = small["views"][name], large["views"][name]
        ratios[name] = {
            "sink": lg["median_sink_s"] / s["median_sink_s"],
            "scratch": lg["median_scratch_s"] / s["median_scratch_s"],
        }
        table.add_row(
            name,
            *(f"{r['views'][name]['median_sink_s']:.2f}" for r in runs),
            f"{ratios[name]['sink']:.2f}x",
            *(f"{r['views'][name]['median_scratch_s']:.2f}" for r in runs),
            f"{ratios[name]['scratch']:.2f}x",
        )
    console.print(table)
    spec = small["rows"] <= 100_000 and large["rows"] >= 10_000_000
    goals = [
        report.goal(
            f"{name}: sink per tick @ {large['rows']:,} / @ {small['rows']:,} rows",
            r["sink"],
            MAX_SCALING,
            at_most=True,
            spec_size=spec,
        )
        for name, r in ratios.items()
    ]
    for run in runs:
        for g in goals_of_size(run, None):
            g["goal"] += f" @ {run['rows']:,} rows"
            goals.append(g)
    return {"runs": runs, "ratios": ratios, "goals": goals}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--change", type=float, default=0.01, help="fraction changed per tick")
    parser.add_argument("--groups", type=int, default=10_000, help="groups of the GROUP BY views")
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--idle", type=int, default=3)
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="data ticks run first and left out of the medians (each view and its scratch "
        "evaluation alike): the JVM's JIT compiles Spark's planner over a process's first "
        "ticks (tick times settled after about 30 here)",
    )
    parser.add_argument("--views", default=",".join(VIEWS), help="comma-separated")
    parser.add_argument(
        "--scaling", default=None, help="comma-separated input sizes, e.g. 100000,10000000"
    )
    parser.add_argument("--change-rows", type=int, default=1_000, help="rows changed (scaling)")
    parser.add_argument(
        "--change-from",
        type=float,
        default=0.0,
        help="where the changed keys start, a fraction of the rows (0: key 0, whose rows hold "
        "every group's min; 0.5: keys inside every group's range)",
    )
    parser.add_argument("--driver-memory", default="12g")
    parser.add_argument(
        "--adaptive", action="store_true", help="adaptive execution on (off by default)"
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting over timeshard's (repeatable), to compare settings",
    )
    args = parser.parse_args()
    bad = [c for c in args.conf if "=" not in c]
    if bad:
        parser.error(f"--conf takes KEY=VALUE, got {bad[0]!r}")
    conf = dict(c.split("=", 1) for c in args.conf)
    args.views = [v for v in args.views.split(",") if v]
    unknown = sorted(set(args.views) - set(VIEWS))
    if unknown:
        raise SystemExit(f"unknown views {unknown}; choose from {','.join(VIEWS)}")
    spark = spark_session(
        app_name="timeshard-bench-view",
        extra_conf={
            "spark.sql.adaptive.enabled": str(args.adaptive).lower(),
            "spark.driver.memory": args.driver_memory,
            **conf,
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    doc: dict[str, Any] = {"params": vars(args)}
    doc["versions"] = report.versions("pyspark", "timeshard")
    if args.scaling:
        sizes = sorted(int(s) for s in args.scaling.split(","))
        doc |= scaling(spark, args, sizes)
        title = "view tick scaling"
        # A run of some views only (each view in a JVM of its own: no other view's
        # cached state) is kept apart from the run of all of them.
        some = args.views != list(VIEWS)
        name = "view_tick_scaling" + ("_" + "_".join(args.views) if some else "")
    else:
        change = max(1, round(args.rows * args.change))
        run = run_size(spark, args, args.rows, change, args.idle)
        print_size(run, args.idle)
        doc |= {"run": run, "goals": goals_of_size(run, args.change)}
        title = f"view ticks, {args.rows:,} rows, {args.change:.2%} change"
        name = f"view_tick_change{args.change:g}"
    report.print_goals(doc["goals"], f"{title}: goals of issue 13")
    print(f"wrote {report.save_json(doc, name)}")
    spark.stop()


if __name__ == "__main__":
    main()
