"""Where timeshard keeps what it fetched or worked out once, for every later process.

``$TIMESHARD_CACHE``, by default ``~/.cache/timeshard``: the Kafka broker's
jars and the Maven repository that fetched them (``maven/``, kept out of
``~/.m2``: :mod:`timeshard.dev.kafka`), and the jars Spark resolved for Maven
packages (:mod:`timeshard.spark.jars`). Anything in it can be deleted; it is
fetched or worked out again.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("TIMESHARD_CACHE") or Path.home() / ".cache" / "timeshard")


__all__ = ["cache_dir"]
