"""Frontiers and descriptions: order laws and encodings."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from timeshard import Description, Frontier, InvalidUsage
from timeshard.progress import advance_by, frontier

frontiers = st.one_of(st.just(Frontier.empty()), st.integers(0, 2**63 - 1).map(Frontier))


@given(frontiers, frontiers, frontiers)
def test_lattice_laws(a: Frontier, b: Frontier, c: Frontier) -> None:
    assert a.join(b) == b.join(a) and a.meet(b) == b.meet(a)
    assert a.join(b).join(c) == a.join(b.join(c))
    assert a.meet(a.join(b)) == a and a.join(a.meet(b)) == a
    assert (a <= b) == (a.join(b) == b)
    assert a <= Frontier.empty() and Frontier.minimum() <= a


@given(frontiers, st.integers(0, 2**63 - 1))
def test_less_equal_matches_order(f: Frontier, t: int) -> None:
    assert f.less_equal(t) == (f <= Frontier(t))
    assert f.less_than(t) == (f < Frontier(t))
    assert advance_by(t, f) >= t
    assert f.is_empty() or advance_by(t, f) >= (f.time or 0)


@given(frontiers)
def test_json_round_trip(f: Frontier) -> None:
    assert Frontier.from_json(f.to_json()) == f


@given(frontiers, frontiers, frontiers)
def test_description_round_trip(a: Frontier, b: Frontier, s: Frontier) -> None:
    lo, hi = a.meet(b), a.join(b)
    d = Description(lo, hi, s)
    assert Description.from_json(d.to_json()) == d


@pytest.mark.parametrize("bad", [-1, 2**63, 1.5, "3", True])
def test_bad_timestamps_raise_naming_the_value(bad: object) -> None:
    with pytest.raises(InvalidUsage, match=repr(bad).replace("(", r"\(").replace(".", r"\.")):
        frontier(bad)  # type: ignore[arg-type]


def test_regressing_description_raises() -> None:
    with pytest.raises(InvalidUsage, match=r"lower \[5\] is beyond upper \[3\]"):
        Description(Frontier(5), Frontier(3))
