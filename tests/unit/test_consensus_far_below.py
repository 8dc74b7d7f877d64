"""``scan`` and ``truncate`` take any ``int`` up to ``MAX_SEQNO`` (consensus invariant 5),
in every backend: one below ``-2**63`` is below every version too.

SQLite bound such a seqno as is and raised a bare OverflowError ("Python int too
large to convert to SQLite INTEGER"), where memory and PostgreSQL answered.
"""

from __future__ import annotations

import pytest
from tests.unit import test_location_arguments

from timeshard.location import (
    CaSResult,
    Consensus,
    VersionedData,
)

#: Every backend, key ``k`` at version 0 (the argument tests' fixture).
consensus = test_location_arguments.consensus


@pytest.fixture
def two_versions(consensus: Consensus) -> Consensus:
    """``consensus`` (every backend, key ``k`` at version 0) with version 3 too."""
    assert consensus.compare_and_set("k", 0, VersionedData(3, b"b")) is CaSResult.COMMITTED
    return consensus


@pytest.mark.parametrize("below", [-1, -(2**63), -(2**63) - 1, -(2**70)])
def test_a_seqno_far_below_zero_is_below_every_version(two_versions: Consensus, below: int) -> None:
    assert [v.seqno for v in two_versions.scan("k", below, 10)] == [0, 3]
    assert two_versions.truncate("k", below) == 0
    assert [v.seqno for v in two_versions.scan("k", below, 1)] == [0]
