"""Retries of blob and consensus calls end Determinate only when no attempt may have
taken effect.

``retry_external`` used to raise Determinate after its last attempt whatever
the attempts raised, so a write whose every attempt timed out after the
request was sent (Indeterminate: the value may be there) was reported as surely
not written.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from timeshard.errors import Determinate, Indeterminate
from timeshard.location import MemoryBlob, UnreliableBlob
from timeshard.persist._internal.blobio import delete_keys, read_part, retry_external
from timeshard.persist.config import PersistConfig

CONFIG = PersistConfig(max_attempts=3, backoff_ms=0.0, max_backoff_ms=0.0)


def test_writes_that_may_have_happened_are_indeterminate() -> None:
    inner = MemoryBlob()
    timing_out = UnreliableBlob(inner, seed=1, fail_rate=0.0, timeout_rate=1.0)
    with pytest.raises(Indeterminate, match="failed 3 times"):
        retry_external(CONFIG, "writing part 's/w/b/p'", lambda: timing_out.set("s/w/b/p", b"x"))
    assert inner.get("s/w/b/p") == b"x"  # it did happen
    inner.set("s/w/b/q", b"y")
    with pytest.raises(Indeterminate):
        delete_keys(timing_out, ["s/w/b/q"], CONFIG)
    assert inner.get("s/w/b/q") is None


def test_one_indeterminate_attempt_among_determinate_ones_is_enough() -> None:
    failures = iter([Indeterminate("timed out"), Determinate("refused"), Determinate("refused")])

    def call() -> None:
        raise next(failures)

    with pytest.raises(Indeterminate, match="refused"):
        retry_external(CONFIG, "writing part 's/w/b/p'", call)


def test_failures_that_surely_did_not_happen_are_determinate() -> None:
    inner = MemoryBlob()
    failing = UnreliableBlob(inner, seed=1, fail_rate=1.0, timeout_rate=0.0)
    with pytest.raises(Determinate, match="failed 3 times"):
        retry_external(CONFIG, "writing part 's/w/b/p'", lambda: failing.set("s/w/b/p", b"x"))
    assert inner.get("s/w/b/p") is None


def test_reads_that_time_out_are_determinate() -> None:
    """A read has no effect to be unsure of: a part read or a consensus read that timed
    out every time is Determinate, so a compare-and-append that never got to its
    compare-and-set does not leave its staged parts for GC as if it might have."""
    from timeshard.location import MemoryConsensus, UnreliableConsensus
    from timeshard.persist._internal.machine import Machine
    from timeshard.persist._internal.parts import PartMeta

    inner = MemoryBlob()
    inner.set("s/w/b/p", b"x")
    timing_out = UnreliableBlob(inner, seed=1, fail_rate=0.0, timeout_rate=1.0)
    part = PartMeta("s/w/b/p", 1, 1, 0, 0, None)
    with pytest.raises(Determinate, match="failed 3 times"):
        read_part(timing_out, part, pa.schema([("k", pa.int64())]), CONFIG)
    consensus = UnreliableConsensus(MemoryConsensus(), seed=1, fail_rate=0.0, timeout_rate=1.0)
    with pytest.raises(Determinate):
        Machine("s", consensus, CONFIG).fetch()
