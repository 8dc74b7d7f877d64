"""The JVM options of the Spark drivers a test run starts, through Spark's ``SPARK_SUBMIT_OPTS``.

A test run starts a hundred or more Spark drivers: this process's session, and
one in every ``timeshard serve``/``run`` subprocess and fault-test worker,
several times over when a test kills and restarts them. Two options make those
starts cheaper on a 2-core machine:

* **A class-data-sharing archive** (:func:`class_archive`): the classes a
  Spark driver loads to start and run its first jobs, dumped once by a small
  Spark program (``-XX:ArchiveClassesAtExit``) and mapped by every later
  driver (``-XX:SharedArchiveFile``). It halved a driver's start here (8.2 s
  to 4.3 s, and its first job 3.6 s to 2.1 s). The archive is kept under the
  user's cache directory, named by the Java and PySpark it was dumped with; a
  JVM that cannot use it (another JVM build, another class path) starts
  without it. One process dumps it, under a lock: CI's two workers, on a
  cache without it, dumped one each side by side (43 s each, where one alone
  takes 32 s); the second now waits for the first's and maps it.
* **C1 only for subprocesses** (``-XX:TieredStopAtLevel=1``): a subprocess
  driver lives a minute or two, too short for the C2 compiler's work to pay
  back (the read-only-replica test took 256 s instead of 332 s). This
  process's session lives for the whole run and keeps both compilers (C1
  alone, the incremental-view model test took 235 s instead of 206 s).

A ``SPARK_SUBMIT_OPTS`` the caller set is left as it is, for this process and
its children alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"
#: Only for the drivers started in subprocesses. C1 alone is the JVM's "client emulation"
#: mode, whose code cache is 48 MB: a server filled it in two minutes, and a full code
#: cache turns the compiler off (every method then interpreted, ten times slower), so the
#: code cache is the tiered default again.
SUBPROCESS_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"

#: What the dumping driver runs: a start, SQL with a shuffle, Parquet out and in, and a
#: mapInArrow (the classes of a tick's jobs).
_WORKLOAD = """
import sys
from pyspark import SparkContext
from timeshard.spark import spark_session
spark = spark_session(app_name="timeshard-class-archive")
df = spark.range(1000).selectExpr("id % 7 AS k", "id AS v")
df.groupBy("k").agg({"v": "sum"}).collect()
df.write.mode("overwrite").parquet(sys.argv[1])
spark.read.parquet(sys.argv[1]).mapInArrow(lambda batches: batches, df.schema).count()
jvm = SparkContext._gateway.proc
spark.stop()
jvm.stdin.close()  # the JVM exits at its stdin's end, and dumps the archive as it exits
sys.exit(jvm.wait(timeout=300))
"""


#: This process's own options, set by :func:`configure` (absent: the caller's are used).
_OWN = "TIMESHARD_TESTS_OWN_SUBMIT_OPTS"


def configure() -> None:
    """Set ``SPARK_SUBMIT_OPTS`` for this run's subprocesses (unless the caller set it)."""
    if SUBMIT_OPTS in os.environ:
        return
    archive = class_archive()
    shared = [f"-XX:SharedArchiveFile={archive}"] if archive is not None else []
    os.environ[_OWN] = " ".join(shared)
    os.environ[SUBMIT_OPTS] = " ".join([*shared, SUBPROCESS_ONLY])


@contextlib.contextmanager
def own_submit_opts() -> Iterator[None]:
    """``SPARK_SUBMIT_OPTS`` for this process's own driver, while it starts."""
    if _OWN not in os.environ:
        yield
        return
    children = os.environ[SUBMIT_OPTS]
    os.environ[SUBMIT_OPTS] = os.environ[_OWN]
    try:
        yield
    finally:
        os.environ[SUBMIT_OPTS] = children


def class_archive() -> Path | None:
    """The class-data-sharing archive of a Spark driver, dumped now if there is none yet.

    None (and the reason printed) if it cannot be dumped: the drivers then start
    without one, as they would anyway.
    """
    import pyspark

    java = os.path.realpath(os.path.join(os.environ.get("JAVA_HOME", "/usr"), "bin", "java"))
    key = hashlib.sha256(f"{java}\n{pyspark.__version__}\n{sys.executable}".encode()).hexdigest()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    archive = cache / "timeshard" / f"spark-classes-{key[:16]}.jsa"
    if archive.exists():
        return archive
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        lock = archive.with_suffix(".lock").open("a")
    except OSError as e:
        print(f"tests: no Spark class archive ({archive.parent}: {e})", file=sys.stderr)
        return None
    with lock:  # another process dumping it: wait for its archive, dump none of our own
        fcntl.flock(lock, fcntl.LOCK_EX)
        return archive if archive.exists() else _dump(archive)


def _dump(archive: Path) -> Path | None:
    """Dump the class archive to ``archive`` (the caller holds its lock)."""
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    parquet = archive.with_suffix(f".{os.getpid()}.parquet")
    env = {**os.environ, SUBMIT_OPTS: f"-XX:ArchiveClassesAtExit={partial}"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _WORKLOAD, str(parquet)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        print("tests: no Spark class archive (its dump took over 600 s)", file=sys.stderr)
        return None
    finally:
        shutil.rmtree(parquet, ignore_errors=True)
    if done.returncode != 0 or not partial.exists():
        tail = (done.stderr or done.stdout)[-2000:]
        print(f"tests: no Spark class archive (its dump failed: {tail})", file=sys.stderr)
        partial.unlink(missing_ok=True)
        return None
    try:
        partial.replace(archive)
    except OSError as e:  # another run renamed its own first: use that one
        print(f"tests: Spark class archive not kept ({e})", file=sys.stderr)
        partial.unlink(missing_ok=True)
    return archive if archive.exists() else None
