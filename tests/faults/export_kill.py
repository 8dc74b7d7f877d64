"""An export worker killed at random while its input shard keeps changing (fault tests).

:class:`ExportUnderKills` owns a shard ``kv`` (``k`` string, ``v`` long)
that it appends KEY VALUE changes to, one time per append (updates and, a
quarter of the time, deletes), and runs ``export_worker.py`` against a
target. :meth:`ExportUnderKills.run` waits for the export to make progress
(appending all the while, so a stuck export fails the test and a slow one
does not), appends some more, kills the worker's whole process group
(driver, JVM, Python workers) with SIGKILL and starts a new one, ``rounds``
times; then appends a last few changes and lets a worker catch up and stop.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from timeshard.location import open_location
from timeshard.persist import PersistClient

WORKER = Path(__file__).with_name("export_worker.py")
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


class ExportUnderKills:
    def __init__(self, tmp_path: Path, seed: int, target: list[str]) -> None:
        self.tmp_path = tmp_path
        self.rng = random.Random(seed)
        self.target = target
        self.blob_uri = f"file://{tmp_path / 'blob'}"
        self.consensus_uri = f"sqlite:///{tmp_path / 'c.db'}"
        self.client = PersistClient(open_location(self.blob_uri, self.consensus_uri))
        self.writer = self.client.open_writer("kv", SCHEMA)
        self.stop = tmp_path / "stop"
        #: The live rows after the last append, and per time the keys it changed (None: deleted).
        self.model: dict[str, int] = {}
        self.changed: dict[int, dict[str, int | None]] = {}
        self.t = 0

    def append_some(self) -> None:
        updates = []
        changed: dict[str, int | None] = {}
        for k in self.rng.sample([f"k{i}" for i in range(25)], 5):
            if k in self.model:
                updates.append(((k, self.model[k]), self.t, -1))
            if self.rng.random() < 0.25 and k in self.model:
                del self.model[k]
                changed[k] = None
            else:
                self.model[k] = self.rng.randrange(10**6)
                updates.append(((k, self.model[k]), self.t, 1))
                changed[k] = self.model[k]
        self.writer.append(updates, self.t, self.t + 1)
        self.changed[self.t] = changed
        self.t += 1

    def checker(
        self, table_and_progress: Callable[[], tuple[dict[str, int], int]]
    ) -> Callable[[], int]:
        """``check()``: the target equals the shard's snapshot at its progress - 1; the progress.

        ``table_and_progress`` reads the target's rows (``k -> v``) and its
        recorded frontier together (0: nothing exported yet, the table empty).
        """
        reader = self.client.open_leased_reader("kv")

        def check() -> int:
            table, frontier = table_and_progress()
            if frontier > 0:
                want = {r["k"]: r["v"] for r in reader.snapshot(frontier - 1).to_pylist()}
                assert table == want, frontier
            else:
                assert table == {}
            return frontier

        return check

    def start(self) -> subprocess.Popen[bytes]:
        log = (self.tmp_path / f"worker-{time.monotonic_ns()}.log").open("wb")
        args = [self.blob_uri, self.consensus_uri, str(self.stop), *self.target]
        return subprocess.Popen(
            [sys.executable, str(WORKER), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
            start_new_session=True,
        )

    def run(
        self,
        progress: Callable[[], int],
        after_kill: Callable[[], object] = lambda: None,
        rounds: int = 3,
    ) -> None:
        """Kill the worker ``rounds`` times at random, then let one catch up (module doc)."""
        worker = self.start()
        try:
            for _ in range(rounds):
                before = progress()
                deadline = time.monotonic() + 180
                while progress() <= before:
                    assert time.monotonic() < deadline, "the export made no progress"
                    self.append_some()
                    time.sleep(0.3)
                for _ in range(self.rng.randrange(1, 8)):
                    self.append_some()
                    time.sleep(self.rng.uniform(0.0, 0.5))
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
                after_kill()
                worker = self.start()
            for _ in range(5):
                self.append_some()
            self.stop.touch()
            worker.wait(timeout=300)
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
