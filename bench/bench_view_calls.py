"""Driver py4j calls per view tick, by call site (issue 13: the driver plans, cheaply).

Builds the inputs and views of ``bench_view_tick.py`` at ``--rows`` rows, runs
``--ticks`` data ticks (each changing ``--change-rows`` rows of both inputs)
and, on the last tick, counts the py4j commands the driver sends while each
view catches up (every command on any thread: object frees by py4j's garbage
collection, under "elsewhere", and the background merges of another view's
arrangement included; keep the machine otherwise idle). Reports per view the total and the
``--top`` call sites in timeshard's code (the innermost timeshard frame).
Counts do not depend on the machine's speed; the job counts are those of
``bench_view_tick.py``.

    source scripts/bootstrap.sh
    python bench/bench_view_calls.py --rows 10000 --change-rows 10
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import py4j.clientserver
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "compare"))

from bench_view_tick import VIEWS, Inputs, install, timed_catch_up
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session


class CallCounter:
    """Counts py4j commands by the innermost timeshard frame that sent them, while on."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.on = False
        send = py4j.clientserver.ClientServerConnection.send_command
        counter = self

        def counted(connection: Any, command: str) -> Any:
            if counter.on:
                counter.counts[counter._site()] += 1
            return send(connection, command)

        py4j.clientserver.ClientServerConnection.send_command = counted  # type: ignore[method-assign]

    @staticmethod
    def _site() -> str:
        for frame in reversed(traceback.extract_stack(limit=60)[:-2]):
            if "/timeshard/" in frame.filename and "/bench/" not in frame.filename:
                module = frame.filename.split("/timeshard/", 1)[1]
                return f"{module}:{frame.name}"
        return "elsewhere"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--change-rows", type=int, default=10)
    parser.add_argument("--ticks", type=int, default=3)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--views", nargs="+", choices=sorted(VIEWS), default=list(VIEWS))
    args = parser.parse_args()
    counter = CallCounter()
    spark = spark_session()
    client = PersistClient(Location.embedded(Path(tempfile.mkdtemp()) / "loc"))
    inputs = Inputs(spark, client, args.rows, args.groups)
    views = {name: install(spark, client, name) for name in args.views}
    last: dict[str, tuple[int, dict[str, Any], list[tuple[str, int]]]] = {}
    for tick in range(1, args.ticks + 1):
        inputs.change(tick, args.change_rows)
        for name, view in views.items():
            counter.counts.clear()
            counter.on = True
            result = timed_catch_up(spark, view)
            counter.on = False
            total = sum(counter.counts.values())
            last[name] = (total, result, counter.counts.most_common(args.top))
    for view in views.values():
        view.close()
    console = Console(width=max(Console().width, 120))
    table = Table(
        "view", "py4j calls (last tick)", "jobs", "top call sites", title=__doc__.splitlines()[0]
    )
    for name, (total, result, top) in last.items():
        sites = "\n".join(f"{n:5d}  {site}" for site, n in top)
        table.add_row(name, f"{total:,}", str(result["jobs"]), sites)
    console.print(table)


if __name__ == "__main__":
    main()
