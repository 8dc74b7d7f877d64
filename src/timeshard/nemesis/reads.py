"""What the runner reads of a run as it goes: shards, their health, the journal, replica logs.

Each read is made for the faults it runs among: :func:`upper` and
:func:`list_shards` retry storage failures (a restarted PostgreSQL), as an
upper taken as 0 would let a recovery pass below it; :func:`upper_or_none`
and :func:`health` answer that they cannot tell now (None; no rows), as the
phases soon look again. :func:`journaled` counts the lines of a kind in the
run's fault journal (:class:`~timeshard.location.unreliable.FaultJournal`),
and :func:`events` reads the JSON events of a replica's log.

Runs in the runner's process, through a
:class:`~timeshard.persist.PersistClient` of the run's location; no Spark.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from timeshard.errors import ExternalError, InvalidUsage
from timeshard.location.unreliable import FaultJournal
from timeshard.nemesis.control import JOURNAL
from timeshard.persist import PersistClient
from timeshard.storage.health import latest_health


def journaled(run_dir: Path, kind: str, replica: int | None = None) -> int:
    """How many faults of ``kind`` the run's journal records so far on ``replica`` (another
    replica's line says nothing of whether this one's window acted), or on any replica
    for a location-wide kind (``replica`` None)."""
    path = run_dir / JOURNAL
    if not path.exists():
        return 0
    return sum(
        e["kind"] == kind and (replica is None or e.get("replica") == replica)
        for e in FaultJournal.read(path)
    )


def upper(client: PersistClient, shard: str, attempts: int = 20) -> int:
    """The upper of ``shard`` (0 if it does not exist yet); storage failures (a restarted
    server) are retried: an upper taken as 0 would let a recovery pass below it."""
    for attempt in range(attempts):
        try:
            upper = client.state(shard).upper.time
        except InvalidUsage:  # not created yet
            return 0
        except Exception:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
            continue
        return upper if upper is not None else 2**63 - 1
    raise AssertionError("unreachable")


def upper_or_none(client: PersistClient, shard: str) -> int | None:
    """The upper of ``shard``: 0 if it does not exist yet, None if it cannot be read now."""
    try:
        upper = client.state(shard).upper.time
    except InvalidUsage:  # not created yet
        return 0
    except Exception:  # consensus down for a moment
        return None
    return upper if upper is not None else 2**63 - 1


def health(client: PersistClient) -> dict[str, dict[str, Any]]:
    """The latest health row of every object (empty if the status shard cannot be read)."""
    try:
        return latest_health(client)
    except Exception:  # no status yet, or storage down: the replicas' errors still say
        return {}


def list_shards(client: PersistClient, attempts: int = 20) -> list[str]:
    """Every shard of the location; storage failures (a restarted server) are retried."""
    for attempt in range(attempts):
        try:
            return client.list_shards()
        except ExternalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def events(log: Path) -> list[dict[str, Any]]:
    events = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith('{"event"'):
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return events


__all__ = [
    "events",
    "health",
    "journaled",
    "list_shards",
    "upper",
    "upper_or_none",
]
