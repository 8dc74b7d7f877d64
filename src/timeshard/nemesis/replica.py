"""One replica of the nemesis pipeline, as its own OS process.

Usage::

    python -m timeshard.nemesis.replica RUN_DIR REPLICA INCARNATION SEED

It runs the pipeline declared in ``RUN_DIR/pipeline.json`` (a
:class:`~timeshard.spec.RunSpec`, as JSON; :class:`~timeshard.controller.Pipeline`)
on a ``local[1]`` SparkSession, over the declared location wrapped in a
:class:`~timeshard.nemesis.control.FaultyLocation`, one tick a second, until
its control file ``RUN_DIR/control-<REPLICA>.json`` says stop. A thread
applies the control file every ``CONTROL_POLL_S``, also in the middle of a
tick; a stop ends the retries of the pipeline's first read of the catalog
(:func:`~timeshard.controller.read_at_start`) at once. The location also
hands its faults to the Spark tasks' part writes and reads
(:func:`timeshard.spark.parts.inject_task_faults`). ``local[1]`` retries no
task, so an injected task fault fails its Spark job, and the pipeline must
take that as a fault.

A tick that fails -- an injected storage fault that outlasted persist's
retries, a full disk, a Spark job that died -- throws the whole pipeline
away and builds it anew from the location at the next tick, as a restarted
process would (crash anywhere); it never patches up operator state in
memory.

Every fault injected in this process (its driver and its Spark tasks) is
recorded in ``RUN_DIR/injected.jsonl``
(:class:`~timeshard.location.unreliable.FaultJournal`), labelled with the
replica and incarnation. After every tick, and after each read at the start
that fails and is tried again (a failing tick), it replaces
``RUN_DIR/heartbeat-<REPLICA>.json``
(:class:`~timeshard.nemesis.liveness.Heartbeat`). Each line of output is one
JSON event: ``ready`` (the first successful tick of this incarnation, with
the seconds since the process started), ``error`` (with the error) and
``stopped``.

Runs on the driver; the pipeline submits Spark jobs.
"""

from __future__ import annotations

import json
import sys
import threading
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
    from timeshard.controller import Pipeline, StartStopped
    from timeshard.location import open_location
    from timeshard.location.unreliable import FaultJournal
    from timeshard.nemesis.control import CONTROL_POLL_S, JOURNAL, Control, FaultyLocation
    from timeshard.nemesis.liveness import Heartbeat
    from timeshard.persist import PersistClient
    from timeshard.spark import spark_session
    from timeshard.spark.parts import inject_task_faults
    from timeshard.spec import RunSpec

    spec = RunSpec.model_validate_json((run_dir / "pipeline.json").read_text())
    assert spec.location.blob and spec.location.consensus, spec.location
    journal = FaultJournal(
        str(run_dir / JOURNAL), (("replica", replica), ("incarnation", incarnation))
    )
    faulty = FaultyLocation(
        open_location(spec.location.blob, spec.location.consensus),
        seed=f"{seed}:{run_dir.name}:{replica}:{incarnation}",
        journal=journal,
    )
    control_file = run_dir / f"control-{replica}.json"
    stop = threading.Event()

    def follow_control() -> None:
        while not stop.is_set():
            control = Control.read(control_file)
            faulty.apply(control)
            if control.stop:
                stop.set()
            time.sleep(CONTROL_POLL_S)

    faulty.apply(Control.read(control_file))
    threading.Thread(target=follow_control, name="control", daemon=True).start()
    client = PersistClient(faulty.location)
    spark = spark_session(
        master="local[1]",
        app_name=f"nemesis-replica-{replica}",
        extra_conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    )
    inject_task_faults(faulty.task_faults)
    pipeline: Pipeline | None = None
    ready = False
    beat = Heartbeat(incarnation, 0)

    def retried(error: str) -> None:  # a read at the start failed: a failing tick, told
        nonlocal beat
        beat = Heartbeat(incarnation, beat.ticks + 1, beat.failing + 1, error[:300])
        beat.write(Heartbeat.path(run_dir, replica))

    while not stop.is_set():
        tick = time.monotonic()
        try:
            if pipeline is None:
                pipeline = Pipeline(
                    spark, client, spec, clock=faulty.clock, on_retry=retried, stop=stop
                )
            failures = pipeline.step()
            if failures:  # as before: a failed tick rebuilds everything from the location
                raise RuntimeError("; ".join(f"{k}: {v}" for k, v in failures.items()))
            beat = Heartbeat(incarnation, beat.ticks + 1, 0, beat.last_error)
            if not ready:
                ready = True
                _event("ready", replica=replica, after_s=round(time.monotonic() - started, 3))
        except StartStopped:  # asked to stop while its first read was retried
            break
        except Exception as e:  # crash anywhere: rebuild everything from the location
            error = f"{type(e).__name__}: {str(e)[:300]}"
            beat = Heartbeat(incarnation, beat.ticks + 1, beat.failing + 1, error)
            _event("error", replica=replica, error=error)
            traceback.print_exc(file=sys.stderr)
            if pipeline is not None:
                try:
                    pipeline.close()
                except Exception as close_error:
                    _event("error", replica=replica, error=f"closing: {close_error!r}"[:300])
            pipeline = None
        beat.write(Heartbeat.path(run_dir, replica))
        stop.wait(max(0.0, TICK_S - (time.monotonic() - tick)))
    if pipeline is not None:
        pipeline.close()
    _event("stopped", replica=replica)
    spark.stop()


def main() -> None:
    run_dir, replica, incarnation, seed = sys.argv[1:5]
    run_replica(Path(run_dir), int(replica), int(incarnation), int(seed))


if __name__ == "__main__":
    main()
