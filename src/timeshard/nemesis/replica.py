"""One replica of the nemesis pipeline, as its own OS process.

Usage::

    python -m timeshard.nemesis.replica RUN_DIR REPLICA INCARNATION SEED

It runs the pipeline declared in ``RUN_DIR/pipeline.json`` (a
:class:`~timeshard.cli.spec.RunSpec`, as JSON; :class:`~timeshard.controller.Pipeline`)
on a ``local[1]`` SparkSession, over the declared location wrapped in a
:class:`~timeshard.nemesis.control.FaultyLocation`, one tick a second, until
its control file ``RUN_DIR/control-<REPLICA>.json`` says stop.

A tick that fails -- an injected storage fault that outlasted persist's
retries, a full disk, a Spark job that died -- throws the whole pipeline
away and builds it anew from the location at the next tick, as a restarted
process would (crash anywhere); it never patches up operator state in
memory. Each line of output is one JSON event: ``ready`` (the first
successful tick of this incarnation, with the seconds since the process
started), ``error`` (with the error), ``injected`` (after a tick that saw
more injected storage faults: this incarnation's counts by kind, so far)
and ``stopped``.

Runs on the driver; the pipeline submits Spark jobs.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

TICK_S = 1.0


def _event(kind: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": kind, "wall_ms": time.time_ns() // 1_000_000, **fields}))
    sys.stdout.write("\n")
    sys.stdout.flush()


def run_replica(run_dir: Path, replica: int, incarnation: int, seed: int) -> None:
    started = time.monotonic()
    from timeshard.cli.spec import RunSpec
    from timeshard.controller import Pipeline
    from timeshard.location import open_location
    from timeshard.nemesis.control import Control, FaultyLocation
    from timeshard.persist import PersistClient
    from timeshard.spark import spark_session

    spec = RunSpec.model_validate_json((run_dir / "pipeline.json").read_text())
    assert spec.location.blob and spec.location.consensus, spec.location
    faulty = FaultyLocation(
        open_location(spec.location.blob, spec.location.consensus),
        seed=f"{seed}:{run_dir.name}:{replica}:{incarnation}",
    )
    client = PersistClient(faulty.location)
    control_file = run_dir / f"control-{replica}.json"
    spark = spark_session(
        master="local[1]",
        app_name=f"nemesis-replica-{replica}",
        extra_conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    )
    pipeline: Pipeline | None = None
    ready = False
    reported: dict[str, int] = {}
    while True:
        control = Control.read(control_file)
        if control.stop:
            break
        faulty.apply(control)
        tick = time.monotonic()
        try:
            if pipeline is None:
                pipeline = Pipeline(spark, client, spec, clock=faulty.clock)
            pipeline.step()
            if not ready:
                ready = True
                _event("ready", replica=replica, after_s=round(time.monotonic() - started, 3))
        except Exception as e:  # crash anywhere: rebuild everything from the location
            _event("error", replica=replica, error=f"{type(e).__name__}: {str(e)[:300]}")
            traceback.print_exc(file=sys.stderr)
            if pipeline is not None:
                try:
                    pipeline.close()
                except Exception as close_error:
                    _event("error", replica=replica, error=f"closing: {close_error!r}"[:300])
            pipeline = None
        injected = faulty.injected()
        if injected != reported:
            reported = injected
            _event("injected", replica=replica, injected=injected)
        time.sleep(max(0.0, TICK_S - (time.monotonic() - tick)))
    if pipeline is not None:
        pipeline.close()
    _event("stopped", replica=replica)
    spark.stop()


def main() -> None:
    run_dir, replica, incarnation, seed = sys.argv[1:5]
    run_replica(Path(run_dir), int(replica), int(incarnation), int(seed))


if __name__ == "__main__":
    main()
