"""The unreliable wrappers check a call's arguments before they draw a fault.

A bad argument (a key, prefix, temporary key, shard id, seqno or scan limit the
real backend refuses) raises InvalidUsage, as the wrapped backend would, even
when every call is set to fail or time out; it draws nothing, so the faults
that the valid calls around it get are the ones the seed gives without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from timeshard.errors import Determinate, Indeterminate, InvalidUsage
from timeshard.location import (
    FileBlob,
    MemoryBlob,
    MemoryConsensus,
    UnreliableBlob,
    UnreliableConsensus,
    VersionedData,
)
from timeshard.location.blob import Blob

TMP = ".tmp-0123456789abcdef"
BAD_BLOB_CALLS: dict[str, Callable[[UnreliableBlob], Any]] = {
    "get": lambda b: b.get("../escape"),
    "set": lambda b: b.set("/abs", b"x"),
    "delete": lambda b: b.delete("a//b"),
    "list_keys": lambda b: b.list_keys("../"),
    "list_temporaries": lambda b: b.list_temporaries("../"),
    "delete_temporary": lambda b: b.delete_temporary("s/w/part-0.parquet"),
}
BAD_CONSENSUS_CALLS: dict[str, Callable[[UnreliableConsensus], Any]] = {
    "head": lambda c: c.head("../s"),
    "compare_and_set": lambda c: c.compare_and_set("s", 3, VersionedData(2, b"x")),
    "compare_and_set key": lambda c: c.compare_and_set("", None, VersionedData(1, b"x")),
    "scan": lambda c: c.scan("s", 0, 0),
    "scan key": lambda c: c.scan("-s", 0, 1),
    "truncate": lambda c: c.truncate("s", 1.5),
    "truncate key": lambda c: c.truncate("a b", 1),
}
RATES = [(1.0, 0.0), (0.0, 1.0)]  # every call fails; every call times out


def inners(tmp_path: Path) -> list[Blob]:
    return [MemoryBlob(), FileBlob(tmp_path / "blob")]


@pytest.mark.parametrize("call", sorted(BAD_BLOB_CALLS))
@pytest.mark.parametrize(("fail_rate", "timeout_rate"), RATES)
def test_a_bad_blob_argument_is_refused_before_any_fault(
    tmp_path: Path, call: str, fail_rate: float, timeout_rate: float
) -> None:
    for inner in inners(tmp_path):
        blob = UnreliableBlob(inner, seed=1, fail_rate=fail_rate, timeout_rate=timeout_rate)
        with pytest.raises(InvalidUsage):
            BAD_BLOB_CALLS[call](blob)
        assert blob.calls == 0 and not blob.injected, (inner, blob.injected)


@pytest.mark.parametrize("call", sorted(BAD_CONSENSUS_CALLS))
@pytest.mark.parametrize(("fail_rate", "timeout_rate"), RATES)
def test_a_bad_consensus_argument_is_refused_before_any_fault(
    call: str, fail_rate: float, timeout_rate: float
) -> None:
    consensus = UnreliableConsensus(MemoryConsensus(), 1, fail_rate, timeout_rate)
    with pytest.raises(InvalidUsage):
        BAD_CONSENSUS_CALLS[call](consensus)
    assert consensus.calls == 0 and not consensus.injected


def outcomes(blob: UnreliableBlob, bad_between: bool) -> list[str]:
    """What each of a fixed sequence of valid calls did, with or without bad calls between."""
    seen = []
    for i in range(40):
        if bad_between:
            for bad in BAD_BLOB_CALLS.values():
                with pytest.raises(InvalidUsage):
                    bad(blob)
        try:
            blob.get(f"s/k{i}") if i % 2 else blob.set(f"s/k{i}", b"v")
            seen.append("ok")
        except (Determinate, Indeterminate) as e:
            seen.append(type(e).__name__)
    return seen


def test_bad_calls_leave_the_faults_of_the_valid_ones_as_the_seed_gives_them() -> None:
    alone = outcomes(UnreliableBlob(MemoryBlob(), 7, 0.3, 0.3), bad_between=False)
    mixed = outcomes(UnreliableBlob(MemoryBlob(), 7, 0.3, 0.3), bad_between=True)
    assert mixed == alone
    assert {"ok", "Determinate", "Indeterminate"} <= set(alone)  # the stream does inject
