"""Lagging since holds: at most one downgrade per step, never past what the holder asked for."""

from __future__ import annotations

import itertools
import random

from timeshard.storage.since_holds import SinceHolds


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
