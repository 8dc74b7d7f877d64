"""``timeshard subscribe``: a shard's snapshot at a time, then each update as it becomes definite.

Everything is printed on stdout as JSON lines: one line per row of the
snapshot at ``--from``, then, until ``--seconds`` have passed, one line per
row of each batch of updates and a ``{"progress": ...}`` line for each
frontier the shard's upper reaches.

The start time is ``--from``, by default the latest readable one
(``upper - 1``), or, for a closed shard (a dropped view's), its last time,
where it has all its updates; a time below the shard's since is an error
naming its readable times. A shard not yet written beyond it (an empty one,
say) is waited for, up to ``--seconds`` (:func:`_wait_for_upper_past`); if it
never is, nothing is printed.

Runs in this process, with pyarrow (a leased reader's snapshot and listen):
no Spark.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

import typer

from timeshard.cli.options import (
    DEFAULT_LOCATION,
    BlobOpt,
    ConsensusOpt,
    LocationOpt,
    check_seconds,
    location_from,
)
from timeshard.errors import SinceError
from timeshard.persist import PersistClient, ReadHandle
from timeshard.persist.as_of import common_as_of, not_readable


def subscribe(
    obj: Annotated[str, typer.Argument(help="The shard or view to follow.")],
    from_: Annotated[
        int | None, typer.Option("--from", help="Start time (default: the latest readable).")
    ] = None,
    seconds: Annotated[float, typer.Option(help="Stop after this long.")] = 30.0,
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
) -> None:
    """Print the snapshot at --from, then every update as it becomes definite (JSON lines).

    A shard not yet written up to --from (an empty one, say) is waited for,
    up to --seconds. A closed shard (a dropped view's) starts by default at its
    last time, where it has all its updates.
    """
    from timeshard.persist import Progress, Updates

    check_seconds(seconds)
    deadline = time.monotonic() + seconds
    reader = PersistClient(location_from(location, blob, consensus)).open_leased_reader(obj)
    try:
        upper = reader.fetch_recent_upper()
        if from_ is None and upper.is_empty():  # closed: at its last time, as a snapshot
            from_ = common_as_of({obj: reader}, None)
        if from_ is None:
            from_ = (upper.time or 1) - 1
        if not reader.since.less_equal(from_):
            raise not_readable(reader, from_)
        if not _wait_for_upper_past(reader, from_, deadline):
            return
        try:
            rows = reader.snapshot(from_).to_pylist()
            listen = reader.listen(from_)
        except SinceError as e:
            raise not_readable(reader, from_) from e
        for r in rows:
            sys.stdout.write(json.dumps(r, default=str) + "\n")
        while time.monotonic() < deadline:
            for event in listen.next(timeout_s=min(1.0, max(deadline - time.monotonic(), 0))):
                if isinstance(event, Updates):
                    for r in event.table.to_pylist():
                        sys.stdout.write(json.dumps(r, default=str) + "\n")
                elif isinstance(event, Progress):
                    sys.stdout.write(json.dumps({"progress": event.frontier.to_json()}) + "\n")
            sys.stdout.flush()
        listen.expire()
    finally:
        reader.expire()


def _wait_for_upper_past(reader: ReadHandle, t: int, deadline: float) -> bool:
    """Wait until ``reader``'s shard is written beyond ``t``; False if ``deadline`` passes."""
    delay = 0.01
    while reader.fetch_recent_upper().less_equal(t):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.25)
    return True


__all__ = ["subscribe"]
