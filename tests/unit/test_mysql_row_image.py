"""A row event that does not carry every column (``binlog_row_image`` not FULL)."""

from __future__ import annotations

import pytest

from timeshard.storage.mysql_types import Column, Undecodable, binlog_text


@pytest.mark.parametrize("none_source", ["cols bitmap", "same with before values"])
def test_a_column_missing_from_the_row_image_does_not_decode(none_source: str) -> None:
    with pytest.raises(Undecodable, match=r"column 'b' .*binlog_row_image"):
        binlog_text(None, Column("b", "text"), none_source, None)
