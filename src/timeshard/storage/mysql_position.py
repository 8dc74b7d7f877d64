"""Where a MYSQL source's server is in its binlog: GTID frontiers and binlog positions.

The source's frontier is the server's GTID position
(:func:`current_frontier`: ``@@gtid_binlog_pos`` joined with the snapshot's
partition, :data:`SNAPSHOT_PARTITION`), which may never go below one the
source has passed (:func:`check_not_behind`). The binlog reader reads by
file and position instead: :func:`binlog_end` is the binlog's end now,
:func:`start_position` a position known to precede every transaction from a
GTID frontier on, and :func:`binlog_order` orders positions by the file's
number. The module doc of :mod:`~timeshard.storage.mysql_source` says why.

What runs where: the driver (``upper``, and ``read``'s planning: where the
stream starts and ends); the Spark read task
(:mod:`~timeshard.storage.mysql_read`) takes the binlog's end after its
snapshot and compares positions as it streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from timeshard.errors import SourceUnavailable
from timeshard.storage.mysql_server import _text
from timeshard.storage.mysql_types import covers, gtid_frontier
from timeshard.storage.reclock import join_frontiers

#: The partition of the snapshot's records (every frontier has it, at least at 1).
SNAPSHOT_PARTITION = "0"


def binlog_order(position: tuple[str, int]) -> tuple[int, str, int]:
    """A sort key of binlog positions: the file's numeric suffix, then the offset in it.

    File names compare by number, not as strings (``binlog.999999`` precedes
    ``binlog.1000000``).
    """
    name, offset = position
    suffix = name.rpartition(".")[2]
    return (int(suffix) if suffix.isdigit() else -1, name, offset)


def binlog_end(cur: Any) -> tuple[str, int]:
    """The binlog's end now: (file, position)."""
    cur.execute("SHOW MASTER STATUS")
    status = cur.fetchone()
    if status is None:
        raise SourceUnavailable("the MySQL server has no binlog (log_bin is off)")
    return (_text(status[0]), int(status[1]))


def current_frontier(cur: Any) -> dict[str, int]:
    """``@@gtid_binlog_pos`` as a frontier, joined with the snapshot partition's ``{"0": 1}``."""
    cur.execute("SELECT @@gtid_binlog_pos")
    (position,) = cur.fetchone()
    return join_frontiers({SNAPSHOT_PARTITION: 1}, gtid_frontier(_text(position or "")))


def check_not_behind(
    source: str, now: Mapping[str, int], before: Mapping[str, int], what: str
) -> None:
    """Raises a definite ``SourceUnavailable`` if ``now`` is below ``before`` in a domain.

    After ``RESET MASTER``, a restore or a failover to a server with lower
    sequence numbers, new transactions would reuse offsets the source has
    passed: they would be skipped, so the source stops instead.
    """
    behind = {d: (now.get(d, 0), seq) for d, seq in before.items() if now.get(d, 0) < seq}
    if behind:
        detail = ", ".join(
            f"domain {d} is at {have} (next sequence number), {what} needs {need}"
            for d, (have, need) in sorted(behind.items())
        )
        raise SourceUnavailable(
            f"MYSQL source {source!r}: the upstream GTID position went backwards: {detail} "
            "(RESET MASTER, a restore or a failover?): transactions would be skipped",
            definite=True,
        )


def start_position(
    cur: Any,
    lo: Mapping[str, int],
    checkpoints: Sequence[tuple[tuple[str, int], Mapping[str, int]]] = (),
) -> tuple[str, int]:
    """The latest binlog position known to precede every transaction from ``lo`` on.

    A position an earlier read stopped at (``checkpoints``), if its file is
    still there and its GTID frontier is at or below ``lo``; else the start
    of the newest file whose first GTID frontier is (``BINLOG_GTID_POS(file, 4)``).
    """
    cur.execute("SHOW BINARY LOGS")
    files = [_text(r[0]) for r in cur.fetchall()]
    for at, frontier in reversed(checkpoints):
        if at[0] in files and covers(frontier, lo):
            return at
    for name in reversed(files):
        cur.execute("SELECT BINLOG_GTID_POS(%s, 4)", (name,))
        (position,) = cur.fetchone()
        # NULL is "not found" (unknown), not the empty position "": skip the file.
        if position is not None and covers(gtid_frontier(_text(position)), lo):
            return (name, 4)
    raise SourceUnavailable(
        f"the MySQL binlog from GTID frontier {dict(lo)} was purged (the oldest file is "
        f"{files[0] if files else None!r}): the changes since the resumption frontier are lost",
        definite=True,
    )


__all__ = [
    "SNAPSHOT_PARTITION",
    "binlog_end",
    "binlog_order",
    "check_not_behind",
    "current_frontier",
    "start_position",
]
