"""A compare-and-append fenced by a critical reader's token (a deploy generation).

The fence is decided in the same compare-and-set as the upper: a writer whose
generation was replaced cannot slip one batch in between checking its token
and appending.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from timeshard import Fenced, Frontier, Indeterminate, InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus, VersionedData
from timeshard.persist import Appended, PersistClient, PersistConfig

SCHEMA = pa.schema([("k", pa.string())])


def client_of(consensus: MemoryConsensus) -> PersistClient:
    blob = MemoryBlob()
    return PersistClient(Location(blob, consensus), PersistConfig(backoff_ms=0.0))


def keys(client: PersistClient) -> list[str]:
    return sorted(r["k"] for r in client.open_unleased_reader("s").snapshot(0).to_pylist())


def test_an_append_fenced_by_its_own_token_lands() -> None:
    client = client_of(MemoryConsensus())
    writer = client.open_writer("s", SCHEMA)
    client.open_critical_since("s", "deploy", "g1")
    batch = writer.batch([(("a",), 0, 1)], 0, 1)
    result = writer.compare_and_append_batch([batch], 0, 1, fence=("deploy", "g1"))
    assert isinstance(result, Appended) and result.upper == Frontier(1)
    assert keys(client) == ["a"]


@pytest.mark.parametrize("replaced", [True, False], ids=["token-replaced", "reader-gone"])
def test_an_append_whose_token_was_replaced_appends_nothing(replaced: bool) -> None:
    client = client_of(MemoryConsensus())
    writer = client.open_writer("s", SCHEMA)
    deploy = client.open_critical_since("s", "deploy", "g1")
    if replaced:
        deploy.compare_and_downgrade_since("g1", "g2", Frontier.minimum())
    else:
        client.drop_critical_since("s", "deploy")
    batch = writer.batch([(("a",), 0, 1)], 0, 1)
    with pytest.raises(Fenced, match="deploy"):
        writer.compare_and_append_batch([batch], 0, 1, fence=("deploy", "g1"))
    state = client.state("s")
    assert state.upper == Frontier(0) and not state.batches
    batch.delete()  # nothing was appended: the batch is still staged


def test_a_fence_that_is_not_a_pair_is_invalid_usage() -> None:
    client = client_of(MemoryConsensus())
    writer = client.open_writer("s", SCHEMA)
    with pytest.raises(InvalidUsage, match="fence"):
        writer.compare_and_append_batch([], 0, 1, fence="deploy")  # type: ignore[arg-type]


class CommitsThenRaises(MemoryConsensus):
    """Commits, runs ``meanwhile`` (another process's change), then raises Indeterminate."""

    meanwhile: Callable[[], Any] | None = None

    def compare_and_set(self, key: str, expected: int | None, new: VersionedData) -> Any:
        result = super().compare_and_set(key, expected, new)
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
            raise Indeterminate("the commit may have been sent")
        return result


def test_an_append_that_landed_before_the_token_was_replaced_is_appended() -> None:
    """The retry after an indeterminate attempt finds its own append: it stays Appended
    (its parts are in the shard), although the fence no longer holds."""
    consensus = CommitsThenRaises()
    client = client_of(consensus)
    writer = client.open_writer("s", SCHEMA)
    deploy = client_of(consensus).open_critical_since("s", "deploy", "g1")  # another process
    batch = writer.batch([(("a",), 0, 1)], 0, 1)
    consensus.meanwhile = lambda: deploy.compare_and_downgrade_since("g1", "g2", 0)
    result = writer.compare_and_append_batch([batch], 0, 1, fence=("deploy", "g1"))
    assert isinstance(result, Appended) and result.upper == Frontier(1)
    assert client.state("s").critical_readers["deploy"].opaque == "g2"
    assert keys(client) == ["a"]


def test_fence_since_moves_the_fencing_readers_since_in_the_same_compare_and_set() -> None:
    client = client_of(MemoryConsensus())
    writer = client.open_writer("s", SCHEMA)
    client.open_critical_since("s", "deploy", "g1")
    for t in range(3):
        seqno = client.state("s").seqno
        writer.compare_and_append_batch(
            [writer.batch([((str(t),), t, 1)], t, t + 1)],
            t,
            t + 1,
            fence=("deploy", "g1"),
            fence_since=t,
        )
        state = client.state("s")
        assert state.seqno == seqno + 1  # one compare-and-set: the append and the hold
        assert state.critical_readers["deploy"].since == Frontier(t)
        assert state.since == Frontier(t)
    # never back
    writer.compare_and_append_batch([], 3, 4, fence=("deploy", "g1"), fence_since=0)
    assert client.state("s").critical_readers["deploy"].since == Frontier(2)


@pytest.mark.parametrize(
    "fence,since", [(None, 0), (("deploy", "g1"), 1)], ids=["no-fence", "at-new-upper"]
)
def test_a_fence_since_without_a_fence_or_at_the_new_upper_is_invalid_usage(
    fence: Any, since: int
) -> None:
    client = client_of(MemoryConsensus())
    writer = client.open_writer("s", SCHEMA)
    client.open_critical_since("s", "deploy", "g1")
    with pytest.raises(InvalidUsage, match="fence_since"):
        writer.compare_and_append_batch([], 0, 1, fence=fence, fence_since=since)
    assert client.state("s").upper == Frontier(0)
