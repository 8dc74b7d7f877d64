"""The inputs every system of a comparison reads: generated once, as Parquet batch files.

A workload's input is a directory, written once by :func:`ensure_inputs` and
reused as long as its generator parameters are unchanged:

```
<dir>/manifest.json
W1 (KEY VALUE upsert commands):
  <dir>/batch-00000.parquet, <dir>/batch-00001.parquet, ...
    key: int64, value: string (64 chars; null = delete), offset: int64
W2 (AUCTION):
  <dir>/auctions/batch-00000.parquet, ...   id, seller, item, end_offset, offset (int64 but item)
  <dir>/bids/batch-00000.parquet, ...       id, buyer, auction_id, amount, offset (int64)
```

Batch 0 is the snapshot: in W1 every key once (offsets ``[0, keys)``), in W2
the first ``snapshot`` offsets of the auction stream. Each later batch holds
``commands`` commands (W1) or ``rate`` offsets (W2). Rows are sorted by
``offset``, and each batch covers the offsets ``[offset_lo, offset_hi)``;
batches are contiguous. In W1 the offset is strictly increasing across the
whole input (one command per offset); in W2 offset ``o`` opens auction ``o``
(open while the stream is below ``end_offset = o + 5``) and places three
bids, so the bids of one offset share it.

The data are those of timeshard's own load generators, read with one
partition so that their offset is the global offset:
:class:`~timeshard.storage.sources.KeyValueGenerator` (``partitions=1``,
``value_size=64``, ``deletes``) for W1, and
:class:`~timeshard.storage.sources.AuctionGenerator` (its ``auctions`` and
``bids`` subsources; the static ones are left out) for W2. Generation runs in
a child process of timeshard's own venv with a local SparkSession, so the
caller holds no JVM afterwards.

``manifest.json``::

    {"format": 1, "workload": "w1" | "w2", "params": {...generator parameters...},
     "subsources": {"commands": {"key": "int64", ...}},  # W2: "auctions", "bids"
     "batches": [{"index": 0, "offset_lo": 0, "offset_hi": 1000000,
                  "files": {"commands": "batch-00000.parquet"},
                  "rows": {"commands": 1000000}}, ...]}

Making batches available over time (the same for every system): batch 0 is
given at the start; then batch ``i >= 1`` becomes available at
:meth:`Schedule.available` -- every ``interval`` seconds, half an interval
after a multiple of ``interval`` in epoch time (Spark's processing-time
triggers and timeshard's tick loop both fire at those multiples, so on
average a batch waits half an interval for the next tick). A streaming peer
gets them as hard links appearing in a directory it watches
(:class:`Releaser`); timeshard reads them through :class:`ParquetBatchSource`,
whose upper covers the batches available so far.

Run as a script to generate (what :func:`ensure_inputs` does in a child)::

    .venv/bin/python bench/compare/inputs.py w1 DIR --keys 10000 --commands 1000 --batches 5
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
FORMAT = 1
WORKLOADS = ("w1", "w2")

W1_SCHEMA = pa.schema([("key", pa.int64()), ("value", pa.string()), ("offset", pa.int64())])
AUCTIONS_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("seller", pa.int64()),
        ("item", pa.string()),
        ("end_offset", pa.int64()),
        ("offset", pa.int64()),
    ]
)
BIDS_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("buyer", pa.int64()),
        ("auction_id", pa.int64()),
        ("amount", pa.int64()),
        ("offset", pa.int64()),
    ]
)
SUBSOURCES: dict[str, dict[str, pa.Schema]] = {
    "w1": {"commands": W1_SCHEMA},
    "w2": {"auctions": AUCTIONS_SCHEMA, "bids": BIDS_SCHEMA},
}
W1_DEFAULTS: dict[str, Any] = {
    "keys": 1_000_000,
    "commands": 100_000,
    "batches": 10,
    "value_size": 64,
    "deletes": 0.1,
    "seed": 0,
}
W2_DEFAULTS: dict[str, Any] = {
    "snapshot": 100_000,
    "rate": 25_000,
    "batches": 10,
    "users": 10_000,
    "seed": 0,
}


@dataclass(frozen=True)
class Batch:
    index: int
    offset_lo: int
    offset_hi: int
    files: dict[str, str]
    rows: dict[str, int]


@dataclass(frozen=True)
class Manifest:
    """A workload's input directory, as ``manifest.json`` describes it."""

    dir: Path
    workload: str
    params: dict[str, Any]
    batches: list[Batch]

    @property
    def subsources(self) -> dict[str, pa.Schema]:
        return SUBSOURCES[self.workload]

    def path(self, index: int, subsource: str) -> Path:
        return self.dir / self.batches[index].files[subsource]

    def rows(self, index: int) -> int:
        """Input rows of batch ``index``, over all subsources."""
        return sum(self.batches[index].rows.values())

    @staticmethod
    def load(dir: Path) -> Manifest:
        doc = json.loads((dir / "manifest.json").read_text())
        if doc.get("format") != FORMAT:
            raise ValueError(f"{dir}: manifest format {doc.get('format')!r}, expected {FORMAT}")
        return Manifest(
            dir=dir,
            workload=doc["workload"],
            params=doc["params"],
            batches=[Batch(**b) for b in doc["batches"]],
        )


def default_dir(workload: str, **params: Any) -> Path:
    """Where the benchmarks keep the input of ``workload`` with ``params`` (under bench/results)."""
    p = resolve_params(workload, params)
    tag = "-".join(f"{k}{v}" for k, v in sorted(p.items()))
    return ROOT / "bench" / "results" / "inputs" / f"{workload}-{tag}"


def _file_name(index: int) -> str:
    return f"batch-{index:05d}.parquet"


def resolve_params(workload: str, params: dict[str, Any]) -> dict[str, Any]:
    """The full generator parameters: the defaults, overridden by ``params`` (validated)."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    defaults = W1_DEFAULTS if workload == "w1" else W2_DEFAULTS
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(f"{workload}: unknown input parameters {unknown}; know {sorted(defaults)}")
    out = {**defaults, **{k: v for k, v in params.items() if v is not None}}
    for k, v in out.items():
        if k == "deletes":
            if not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"deletes must be in [0, 1], got {v!r}")
            out[k] = float(v)
        elif not isinstance(v, int) or v < (0 if k == "seed" else 1):
            raise ValueError(f"{workload} parameter {k} must be a positive int, got {v!r}")
    return out


def ensure_inputs(workload: str, dir: Path, **params: Any) -> Manifest:
    """The input of ``workload`` with ``params`` in ``dir``: reused if there, else generated.

    An existing directory whose manifest has other parameters is replaced.
    Generation runs in a child process (timeshard's venv, a local SparkSession).
    """
    resolved = resolve_params(workload, params)
    dir = Path(dir)
    if (dir / "manifest.json").exists():
        try:
            found = Manifest.load(dir)
            if found.workload == workload and found.params == resolved:
                return found
        except (ValueError, KeyError, TypeError):
            pass
    if dir.exists():
        shutil.rmtree(dir)
    python = ROOT / ".venv" / "bin" / "python"
    cmd = [str(python if python.exists() else sys.executable), __file__, workload, str(dir)]
    for k, v in resolved.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": cmd[0]}
    subprocess.run(cmd, check=True, env=env)
    return Manifest.load(dir)


def _write(table: pa.Table, schema: pa.Schema, path: Path) -> int:
    table = table.select(schema.names).cast(schema).sort_by("offset")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    tmp.rename(path)
    return int(table.num_rows)


def generate(workload: str, dir: Path, params: dict[str, Any]) -> Manifest:
    """Write the input (runs a local SparkSession in this process)."""
    sys.path.insert(0, str(ROOT / "src"))
    from timeshard.spark import spark_session
    from timeshard.storage.sources import AuctionGenerator, KeyValueGenerator

    spark = spark_session(app_name=f"timeshard-inputs-{workload}")
    dir.mkdir(parents=True, exist_ok=True)
    batches: list[Batch] = []
    if workload == "w1":
        kv = KeyValueGenerator(
            name="kv",
            keys=params["keys"],
            value_size=params["value_size"],
            partitions=1,
            rate=params["commands"],
            seed=params["seed"],
            deletes=params["deletes"],
        )
        bounds = [0, params["keys"]]
        bounds += [params["keys"] + i * params["commands"] for i in range(1, params["batches"] + 1)]
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            df = kv.read(spark, {"0": lo}, {"0": hi}).withColumnRenamed("_offset", "offset")
            name = _file_name(i)
            n = _write(df.toArrow(), W1_SCHEMA, dir / name)
            batches.append(Batch(i, lo, hi, {"commands": name}, {"commands": n}))
    else:
        auction = AuctionGenerator(name="auction", users=params["users"], seed=params["seed"])
        bounds = [0, params["snapshot"]]
        bounds += [params["snapshot"] + i * params["rate"] for i in range(1, params["batches"] + 1)]
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            frames = auction.read(spark, {"0": lo}, {"0": hi})
            files: dict[str, str] = {}
            rows: dict[str, int] = {}
            for sub, schema in SUBSOURCES["w2"].items():
                df = frames[sub].withColumnRenamed("_offset", "offset")
                files[sub] = f"{sub}/{_file_name(i)}"
                rows[sub] = _write(df.toArrow(), schema, dir / files[sub])
            batches.append(Batch(i, lo, hi, files, rows))
    spark.stop()
    manifest = {
        "format": FORMAT,
        "workload": workload,
        "params": params,
        "subsources": {
            sub: {f.name: str(f.type) for f in schema}
            for sub, schema in SUBSOURCES[workload].items()
        },
        "batches": [
            {
                "index": b.index,
                "offset_lo": b.offset_lo,
                "offset_hi": b.offset_hi,
                "files": b.files,
                "rows": b.rows,
            }
            for b in batches
        ],
    }
    (dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return Manifest.load(dir)


# -- making batches available over time ---------------------------------------------------------


@dataclass
class Schedule:
    """When batch ``i >= 1`` becomes available: ``start + (i - 1) * interval``.

    ``start`` is half an interval after the first multiple of ``interval``
    (epoch seconds) that is at least ``not_before``.
    """

    interval: float
    not_before: float
    start: float = field(init=False)

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"interval must be positive, got {self.interval!r}")
        self.start = math.ceil(self.not_before / self.interval) * self.interval
        self.start += self.interval / 2

    def available(self, index: int) -> float:
        assert index >= 1, index
        return self.start + (index - 1) * self.interval

    def released(self, now: float, batches: int) -> int:
        """How many of batches ``1 .. batches - 1`` are available at ``now``, plus batch 0."""
        if now < self.start:
            return 1
        return min(batches, 2 + int((now - self.start) // self.interval))

    def next_tick(self, now: float) -> float:
        """The first multiple of ``interval`` (epoch seconds) after ``now``."""
        return (math.floor(now / self.interval) + 1) * self.interval


class Releaser(threading.Thread):
    """Hard-links batch files into watched directories when they become available.

    ``targets`` maps a subsource to the directory its files appear in. Batch 0
    is released by :meth:`release_snapshot`; :meth:`start_schedule` releases
    batches ``1 .. last`` at their :class:`Schedule` times. ``available[i]``
    is the wall time (epoch seconds) batch ``i`` appeared.
    """

    def __init__(self, manifest: Manifest, targets: dict[str, Path], last: int) -> None:
        super().__init__(daemon=True, name="releaser")
        self.manifest = manifest
        self.targets = targets
        self.last = last
        self.available: dict[int, float] = {}
        self.schedule: Schedule | None = None
        self._stop = threading.Event()
        for d in targets.values():
            d.mkdir(parents=True, exist_ok=True)

    def _release(self, index: int) -> None:
        for sub, d in self.targets.items():
            src = self.manifest.path(index, sub)
            os.link(src, d / src.name)
        self.available[index] = time.time()

    def release_snapshot(self) -> None:
        self._release(0)

    def start_schedule(self, interval: float) -> Schedule:
        self.schedule = Schedule(interval, time.time())
        self.start()
        return self.schedule

    def run(self) -> None:
        assert self.schedule is not None
        for i in range(1, self.last + 1):
            delay = self.schedule.available(i) - time.time()
            if delay > 0 and self._stop.wait(delay):
                return
            self._release(i)

    def stop(self) -> None:
        self._stop.set()


def micro_batch_indices(checkpoint: Path, batch_id: int, source: int = 0) -> list[int]:
    """The input batches a Structured Streaming file source read in micro-batch ``batch_id``.

    Read from the source's metadata log in the query's checkpoint
    (``sources/<source>/<batch_id>``, or the ``.compact`` file that holds it),
    which Spark writes when it plans the micro-batch.
    """
    log = Path(checkpoint) / "sources" / str(source)
    path = log / str(batch_id)
    if not path.exists():
        path = log / f"{batch_id}.compact"
    indices: list[int] = []
    for line in path.read_text().splitlines()[1:]:  # the first line is the log version
        entry = json.loads(line)
        if entry.get("batchId", batch_id) == batch_id:
            name = Path(entry["path"]).name
            if name.startswith("batch-") and name.endswith(".parquet"):
                indices.append(int(name[len("batch-") : -len(".parquet")]))
    return sorted(indices)


# -- a timeshard source over the input --------------------------------------------------------


class ParquetBatchSource:
    """A timeshard source over an input directory: one partition ``"0"``, FromTime = offset.

    Its upper covers the first :attr:`released` batches (the caller's tick
    loop sets it from a :class:`Schedule`); ``read`` reads the Parquet files
    of the batches that overlap the range, in Spark tasks. :attr:`last_upper`
    is the upper it reported last. With more than one subsource it has
    ``outputs()`` (one shard each).
    """

    def __init__(self, name: str, manifest: Manifest, last: int) -> None:
        self.name = name
        self.manifest = manifest
        self.last = last
        self.released = 0
        self.last_upper = 0
        self.payloads = {
            sub: pa.schema([f for f in schema if f.name != "offset"])
            for sub, schema in manifest.subsources.items()
        }
        if len(self.payloads) > 1:
            self.outputs = lambda: dict(self.payloads)

    def payload_schema(self) -> pa.Schema:
        return next(iter(self.payloads.values()))

    def tick(self) -> None:
        """Nothing: the caller releases batches."""

    def upper(self) -> dict[str, int]:
        n = min(self.released, self.last + 1)
        self.last_upper = self.manifest.batches[n - 1].offset_hi if n else 0
        return {"0": self.last_upper}

    def covered(self) -> int:
        """How many batches lie below :attr:`last_upper`."""
        return sum(
            1 for b in self.manifest.batches[: self.last + 1] if b.offset_hi <= self.last_upper
        )

    def read(self, spark: Any, start: dict[str, int], end: dict[str, int]) -> Any:
        from pyspark.sql import functions as F

        from timeshard.spark import arrow_to_spark_schema
        from timeshard.spark.sqltext import bigint_within

        lo, hi = start.get("0", 0), end.get("0", 0)
        batches = [
            b for b in self.manifest.batches if b.offset_lo < hi and b.offset_hi > lo
        ] or self.manifest.batches[:1]
        frames = {}
        for sub, schema in self.manifest.subsources.items():
            files = [str(self.manifest.dir / b.files[sub]) for b in batches]
            df = spark.read.schema(arrow_to_spark_schema(schema)).parquet(*files)
            # Not `offset >= lo`: the bounds would be literals in the scan's generated code,
            # compiled anew every tick, which no real source's read (a Kafka range, a file
            # list) makes timeshard pay.
            df = df.where(bigint_within("offset", lo, hi))
            frames[sub] = df.select(
                F.lit("0").alias("_partition"),
                F.col("offset").alias("_offset"),
                *self.payloads[sub].names,
            )
        return frames if len(frames) > 1 else next(iter(frames.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description="Generate a comparison input directory.")
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("dir", type=Path)
    for k, v in {**W1_DEFAULTS, **W2_DEFAULTS}.items():
        parser.add_argument(f"--{k.replace('_', '-')}", type=type(v), default=None)
    args = vars(parser.parse_args())
    workload, dir = args.pop("workload"), args.pop("dir")
    defaults = W1_DEFAULTS if workload == "w1" else W2_DEFAULTS
    params = resolve_params(workload, {k: v for k, v in args.items() if k in defaults})
    m = generate(workload, dir, params)
    print(f"{dir}: {len(m.batches)} batches, {sum(m.rows(i) for i in range(len(m.batches)))} rows")


if __name__ == "__main__":
    main()
