"""Garbage collection: delete blobs no live state references; truncate consensus.

A state version is *live* if its seqno is at least the least seqno held by a
leased reader (readers hold the state they read parts from) or it is the head.
A part key under the shard's prefix is garbage when

* it was referenced by some retained version but by no live one (it was
  compacted away or its shard state moved on), or
* it was never referenced and the writer that staged it (the second component
  of ``<shard>/<writer>/<batch>/<part>``) is not registered: the writer died
  or was expired before appending.

A write that was killed before it moved its temporary file into place (a Spark
task killed mid-write, a process killed inside ``FileBlob.set``) leaves a hidden
``<shard>/<writer>/<batch>/.tmp-<hex>`` that no key listing names. On a blob
that lists them (:class:`~timeshard.location.blob.Temporaries`) such a
temporary is garbage when it is surely abandoned:

* its writer is not registered (as for parts), or
* some retained version names a part under its batch prefix: the write that
  made it returned, and batch prefixes are never written again (a task attempt
  still running then, one being killed, is no part of any batch).

One under a registered writer's batch that no version names yet may still be
filling: it stays. A write deletes its own batch's temporaries once its job
ended (:func:`delete_temporaries_under`), whether the job failed or not, so
those stay only if the process died first.

Order matters: blobs are listed *before* the head is read, so a writer that
staged a listed part (or temporary) had registered before GC looked at the
writers. Versions below the least held seqno are truncated only after their
garbage is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from timeshard.location.blob import Blob, Temporaries
from timeshard.location.consensus import Consensus
from timeshard.persist._internal import transitions as tr
from timeshard.persist._internal.blobio import delete_keys, retry_external
from timeshard.persist._internal.machine import Machine
from timeshard.persist._internal.state import decode_state
from timeshard.persist.config import PersistConfig

_SCAN_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class GcReport:
    """What one GC run did."""

    deleted_blobs: int
    kept_blobs: int
    truncated_versions: int
    expired: tuple[str, ...]
    unrecognized_keys: tuple[str, ...]
    deleted_temporaries: int = 0


def collect_garbage(
    machine: Machine, consensus: Consensus, blob: Blob, config: PersistConfig
) -> GcReport:
    """Expire stale leases, delete garbage blobs, truncate dead versions."""
    shard = machine.shard_id
    listed = retry_external(
        config,
        f"listing blobs of {shard!r}",
        lambda: [m.key for m in blob.list_keys(f"{shard}/")],
        reads=True,
    )
    temporaries: list[str] = []
    if isinstance(blob, Temporaries):
        temporaries = retry_external(
            config,
            f"listing temporaries of {shard!r}",
            lambda: [m.key for m in blob.list_temporaries(f"{shard}/")],
            reads=True,
        )
    now = config.now_ms()
    expired = machine.apply(lambda s: tr.expire_leases(s, now))
    assert isinstance(expired, list), expired
    head = machine.fetch()
    held = [r.seqno for r in head.leased_readers.values()]
    min_live = min([*held, head.seqno])
    ever: set[str] = set()
    live: set[str] = set(head.referenced_keys())
    earliest = head.seqno
    start = 0
    while True:  # every retained version, a page at a time: a part only a later one names
        page = retry_external(
            config,
            f"scanning consensus of {shard!r}",
            partial(consensus.scan, shard, start, _SCAN_LIMIT),
            reads=True,
        )
        for v in page:
            earliest = min(earliest, v.seqno)
            keys = decode_state(shard, v.seqno, v.data).referenced_keys()
            ever |= keys
            if v.seqno >= min_live:
                live |= keys
        if len(page) < _SCAN_LIMIT or page[-1].seqno >= head.seqno:
            break
        start = page[-1].seqno + 1
    garbage, unrecognized = [], []
    for key in listed:
        parts = key.split("/")
        if len(parts) != 4 or parts[0] != shard:
            unrecognized.append(key)
            continue
        if key in live:
            continue
        if key in ever or parts[1] not in head.writers:
            garbage.append(key)
    deleted = delete_keys(blob, garbage, config)
    batches = {key.rpartition("/")[0] for key in ever | live}
    abandoned = [
        key
        for key in temporaries
        if key.count("/") == 3
        and (key.split("/")[1] not in head.writers or key.rpartition("/")[0] in batches)
    ]
    deleted_temporaries = _delete_temporaries(blob, abandoned, config)
    truncated = 0
    if min_live > earliest:
        truncated = retry_external(
            config,
            f"truncating consensus of {shard!r}",
            lambda: consensus.truncate(shard, min_live),
        )
    return GcReport(
        deleted,
        len(listed) - len(garbage) - len(unrecognized),
        truncated,
        tuple(expired),
        tuple(unrecognized),
        deleted_temporaries,
    )


def delete_temporaries_under(blob: Blob, key_prefix: str, config: PersistConfig) -> int:
    """Delete the temporaries under the batch prefix ``key_prefix`` of a write whose job
    ended (driver): the attempts that filled them were killed. Return how many existed.

    One listing of the prefix (none on a blob without temporaries); each delete is
    retried as an external call. It is an error to call it while the job may still run.
    """
    if not isinstance(blob, Temporaries):
        return 0
    keys = [m.key for m in blob.list_temporaries(key_prefix + "/")]
    return _delete_temporaries(blob, keys, config)


def _delete_temporaries(blob: Blob, keys: list[str], config: PersistConfig) -> int:
    """Delete the temporaries ``keys`` (of a blob that has them); return how many existed."""
    if not keys:
        return 0
    assert isinstance(blob, Temporaries), blob
    deleted = 0
    for key in keys:
        size = retry_external(
            config, f"deleting temporary {key!r}", partial(blob.delete_temporary, key)
        )
        deleted += size is not None
    return deleted


__all__ = ["GcReport", "collect_garbage", "delete_temporaries_under"]
