"""ViewDefinition refuses a REFRESH EVERY or RETAIN HISTORY that is no whole number of ms."""

from __future__ import annotations

from typing import Any

import pytest

from timeshard.compute.view import ViewDefinition
from timeshard.errors import InvalidUsage


@pytest.mark.parametrize("every", [2.5, True, "10", float("nan"), 0, -5])
def test_a_refresh_interval_that_is_no_positive_whole_ms_is_invalid_usage(every: Any) -> None:
    """2.5 made the view read its inputs at the float times 5.0, 7.5; True was 1 ms; '10'
    raised a TypeError; NaN was taken."""
    with pytest.raises(InvalidUsage, match="REFRESH EVERY") as raised:
        ViewDefinition("v", {"a": "in_a"}, "SELECT * FROM a", refresh_every_ms=every)
    assert repr(every) in str(raised.value)


@pytest.mark.parametrize("retain", [True, False, 1.5, "3", -1])
def test_a_retained_history_that_is_no_whole_ms_is_invalid_usage(retain: Any) -> None:
    """True and False were taken as 1 and 0 ms."""
    with pytest.raises(InvalidUsage, match="RETAIN HISTORY") as raised:
        ViewDefinition("v", {"a": "in_a"}, "SELECT * FROM a", retain_history_ms=retain)
    assert repr(retain) in str(raised.value)


def test_whole_intervals_are_taken() -> None:
    view = ViewDefinition(
        "v", {"a": "in_a"}, "SELECT * FROM a", refresh_every_ms=10, retain_history_ms=0
    )
    assert (view.refresh_time(17), view.first_shown_from(17)) == (10, 20)


@pytest.mark.parametrize("shard", [5, "", "a/b", None])
def test_an_input_that_is_no_shard_id_is_invalid_usage(shard: object) -> None:
    """It was accepted, and failed later when the reader opened shard ``5``."""
    with pytest.raises(InvalidUsage, match=r"view 'v': input invalid shard id"):
        ViewDefinition("v", {"a": shard}, "SELECT * FROM a")  # type: ignore[dict-item]
