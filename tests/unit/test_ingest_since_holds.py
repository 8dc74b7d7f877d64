"""Lagging since holds: at most one downgrade per step, never past what the holder asked for."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from timeshard.errors import Determinate, Fenced
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist.holds import RETAIN_READER
from timeshard.storage.health import latest_health
from timeshard.storage.ingest import Ingestion
from timeshard.storage.since_holds import SinceHolds
from timeshard.storage.sources import CounterGenerator


def test_holds_lag_move_one_per_step_and_never_pass_their_target() -> None:
    rng = random.Random(3)
    holds = SinceHolds(every=4)
    moves: list[list[tuple[int, int]]] = [[] for _ in range(3)]
    wanted = [0, 0, 0]
    now = [0]
    hs = [holds.add(lambda t, i=i: moves[i].append((now[0], t))) for i in range(3)]  # type: ignore[misc]
    for step in range(200):
        now[0] = step
        for i, h in enumerate(hs):
            if rng.random() < 0.7:
                wanted[i] += rng.randint(0, 3)
                h.want(wanted[i])
        before = sum(len(m) for m in moves)
        holds.step()
        assert sum(len(m) for m in moves) - before <= 1
        for i, h in enumerate(hs):
            assert h.held is None or h.held <= wanted[i]
    for i in range(3):
        steps = [s for s, _ in moves[i]]
        times = [t for _, t in moves[i]]
        assert times == sorted(times) and len(steps) >= 200 // (4 * 3 + 3), moves[i]
        assert all(b - a <= 4 * 3 for a, b in itertools.pairwise(steps)), steps
    holds.flush()
    assert [h.held for h in hs] == wanted


def test_a_hold_never_asked_never_moves() -> None:
    calls: list[int] = []
    holds = SinceHolds(every=1)
    hold = holds.add(calls.append)
    for _ in range(5):
        holds.step()
    hold.want(7)
    hold.want(3)  # never regresses
    holds.step()
    assert calls == [7]


def test_a_hold_whose_downgrade_fails_keeps_no_other_from_moving() -> None:
    """The failing hold was picked on every step (its wait never reset): no other moved."""
    holds = SinceHolds(every=2)
    moved: list[int] = []
    tried: list[int] = []

    def fenced(t: int) -> None:
        tried.append(t)
        raise Fenced("token swapped")

    bad = holds.add(fenced)
    good = holds.add(moved.append)
    for t in range(1, 30):
        bad.want(t)
        good.want(t)
        holds.step()  # never raises: the tick's data is written already
    assert moved and len(moved) >= 29 // (2 * 2), moved
    assert tried, "the failing hold is tried again"
    assert isinstance(bad.error, Fenced) and good.error is None
    assert holds.errors == [bad.error] and bad.held is None


@dataclass
class _Idle(CounterGenerator):
    """A counter that never produces a record: a step runs no Spark job."""

    def upper(self) -> dict[str, int]:
        return {}


def _ingestion(client: PersistClient, now: list[int], retain_ms: int | None) -> Ingestion:
    def clock() -> int:
        now[0] += 1000
        return now[0]

    return Ingestion(None, client, _Idle(name="c"), clock=clock, retain_history_ms=retain_ms)


@pytest.mark.parametrize("other_retain_ms", [5000, None])
def test_another_instance_declaring_another_retention_fails_no_step(
    tmp_path: Path, other_retain_ms: int | None
) -> None:
    """Its retained-history downgrade raised Fenced on every step, after the data was
    appended, and no other hold moved again (the remap's since froze)."""
    client = PersistClient(Location.embedded(tmp_path))
    now = [10**12]
    a = _ingestion(client, now, 1000)
    for _ in range(3):
        a.step()
    b = _ingestion(client, now, other_retain_ms)  # a redeploy, or another replica
    remap_held = a._remap_hold.held
    retained_since = client.state("c").critical_readers.get(RETAIN_READER)
    for _ in range(40):
        a.step()  # raised Fenced
    assert a.holds.errors == []
    assert latest_health(client)["c"]["status"] == "running"  # after b's starting
    assert a._remap_hold.held is not None and a._remap_hold.held > (remap_held or 0)
    state = client.state("c")
    if other_retain_ms is None:  # b declared none: a gives its hold up
        assert RETAIN_READER not in state.critical_readers and a._retained == []
    else:  # a follows the retention declared last, and keeps moving it
        reader = state.critical_readers[RETAIN_READER]
        assert reader.opaque == str(other_retain_ms)
        assert retained_since is not None and reader.since > retained_since.since
        assert state.upper.time is not None and reader.since.time is not None
        assert reader.since.time <= state.upper.time - 1 - other_retain_ms
    b.close()
    a.close()


def test_a_hold_that_cannot_move_is_the_health_error_of_a_running_source(
    tmp_path: Path,
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    a = _ingestion(client, [10**12], None)

    def down(t: int) -> None:
        raise Determinate("consensus unreachable")

    a._remap_hold._downgrade = down
    for _ in range(10):
        a.step()
    health = latest_health(client)["c"]
    assert health["status"] == "running", health
    assert "since hold not moved" in health["error"] and "consensus unreachable" in health["error"]
    a._remap_hold._downgrade = a.remap.downgrade_since
    for _ in range(10):
        a.step()
    assert latest_health(client)["c"]["error"] is None
    a.close()
