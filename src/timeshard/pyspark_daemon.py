"""The Python worker daemon of timeshard's Spark sessions: PySpark's, on a path without archives.

Spark starts its Python workers with a ``PYTHONPATH`` that begins with
``$SPARK_HOME/python/lib/pyspark.zip``, the py4j source zip and the
``spark-core`` jar (15 MB). Python puts a ``zipimporter`` in
``sys.path_importer_cache`` for each, and PySpark's worker calls
``importlib.invalidate_caches()`` at the start of every task. On Python 3.11
that re-reads the directory of every cached zip archive, in Python: about
300-400 ms per task here, where the task's own work on a tick's rows took
1 ms. A write job of four tasks cost a second on ``local[2]``, most of a view
tick. PySpark also imported itself from the zip, compiling it from source in
every new daemon, since a zip holds no bytecode cache.

When PySpark and py4j are installed as packages (``pip install pyspark``),
the archives only shadow them with the same files. This module, named by
``spark.python.daemon.module``, drops those three entries from ``sys.path``
before PySpark is imported, then runs PySpark's daemon as it would have run.
The jar is dropped in any case (Spark 4's holds no Python module); the zips
stay if PySpark is not installed as a package (a Spark distribution's
``SPARK_HOME`` alone). Other entries, a user's archives among them, stay.

Only the standard library is imported here, and nothing of timeshard's but
this module and the package's ``__init__`` (errors and frontiers).
"""

from __future__ import annotations

import fnmatch
import os
import runpy
import sys

#: The packages whose archives the daemon drops when they are installed as directories.
PACKAGES = ("pyspark", "py4j")
#: The entries Spark puts on its workers' path: always dropped, and dropped if installed.
SPARK_JAR = "spark-core_*.jar"
SPARK_ZIPS = ("pyspark.zip", "py4j-*-src.zip")


def path_without_archives(path: list[str]) -> list[str]:
    """``path`` less Spark's jar, and less Spark's zips if :data:`PACKAGES` are installed."""

    def named(entry: str, *patterns: str) -> bool:
        return any(fnmatch.fnmatch(os.path.basename(entry), p) for p in patterns)

    kept = [p for p in path if not named(p, SPARK_JAR)]
    others = [p for p in kept if not named(p, *SPARK_ZIPS)]
    installed = all(
        any(os.path.isfile(os.path.join(d, name, "__init__.py")) for d in others if d)
        for name in PACKAGES
    )
    return others if installed else kept


def main() -> None:
    """Run PySpark's daemon (its arguments are this module's) on :func:`path_without_archives`."""
    dropped = set(sys.path) - set(kept := path_without_archives(sys.path))
    sys.path[:] = kept

    def inside(entry: str) -> bool:
        return any(entry == d or entry.startswith(d + os.sep) for d in dropped)

    for entry in list(sys.path_importer_cache):  # the archives and the directories in them
        if inside(entry):
            del sys.path_importer_cache[entry]
    for name, module in list(sys.modules.items()):  # namespace packages found in them
        spec = getattr(module, "__spec__", None)  # (`org`, from the jar, which pickle probes)
        portions = list(getattr(module, "__path__", None) or [])
        if spec is not None and spec.origin is None and portions and all(map(inside, portions)):
            del sys.modules[name]
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
