"""Two ingestion workers writing one shard, one of them killed at random (fault tests)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from timeshard.persist import PersistClient, ReadHandle


def worker_starter(
    script: Path, args: list[str], logs: Path
) -> Callable[[int], subprocess.Popen[bytes]]:
    """``start(i)``: run ``script args`` as worker ``i``, its output in a log of its own."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}

    def start(i: int) -> subprocess.Popen[bytes]:
        log = (logs / f"worker-{i}-{time.monotonic_ns()}.log").open("wb")
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    return start


def step_until_stopped(ingestion: Any, stop: Path) -> None:
    """A worker's loop: step until ``stop`` exists; a failed step is retried on the next."""
    print("worker running", flush=True)
    while not stop.exists():
        try:
            ingestion.step()
        except Exception as e:  # health says stalled; the next step tries again
            print(f"step failed: {type(e).__name__}: {e}", flush=True)
        time.sleep(0.2)


def race_and_kill(
    client: PersistClient,
    shard: str,
    start: Callable[[int], subprocess.Popen[bytes]],
    stop: Path,
    rng: random.Random,
    rounds: int = 3,
) -> ReadHandle:
    """Run workers 0 and 1; ``rounds`` times, after progress, SIGKILL one and restart it.

    Progress is the shard's upper moving: a stuck ingestion fails the test
    after 180 s without it, a slow one does not. Returns a reader holding
    the shard's since from the moment it exists, for checking every time.
    """
    workers = [start(0), start(1)]
    try:
        deadline = time.monotonic() + 120
        while shard not in client.list_shards():
            assert time.monotonic() < deadline, "no worker created the output"
            time.sleep(0.5)
        hold = client.open_leased_reader(shard)

        def wait_for_progress() -> None:
            before = client.state(shard).upper.time or 0
            deadline = time.monotonic() + 180
            while (client.state(shard).upper.time or 0) <= before:
                assert time.monotonic() < deadline, "the ingestion made no progress"
                time.sleep(0.5)

        for _ in range(rounds):
            wait_for_progress()
            time.sleep(rng.uniform(0.0, 3.0))
            victim = rng.randrange(2)
            os.kill(workers[victim].pid, signal.SIGKILL)
            workers[victim].wait()
            workers[victim] = start(victim)
        wait_for_progress()
        wait_for_progress()
    finally:
        stop.touch()
        for w in workers:
            try:
                w.wait(timeout=60)
            except subprocess.TimeoutExpired:
                w.kill()
    return hold
