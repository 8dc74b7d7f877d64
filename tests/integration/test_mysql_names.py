"""Column and table names a MYSQL source must quote: backticks, dots, spaces."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from tests.integration.test_mysql_upstream_changes import Upstream, read_raw, started

from timeshard.errors import InvalidUsage
from timeshard.storage.mysql_source import quote

pytestmark = [pytest.mark.mysql]


def test_quote_doubles_backticks_and_refuses_what_no_name_holds() -> None:
    assert quote("a`b") == "`a``b`"
    assert quote("a.b c") == "`a.b c`"
    for bad in ("", "a\x00b", "x" * 65):
        with pytest.raises(InvalidUsage, match="not a MySQL identifier"):
            quote(bad)


def test_a_column_named_with_a_backtick_is_read(upstream: Upstream) -> None:
    upstream.sql("CREATE TABLE `t``1` (id int PRIMARY KEY, `a``b` int, `c d.e` float)")
    upstream.sql("INSERT INTO `t``1` VALUES (1, 2, 0.5)")
    source, origin, first = started(upstream)
    assert [c.name for c in source.tables[0].columns] == ["id", "a`b", "c d.e"]
    upstream.sql("UPDATE `t``1` SET `a``b` = 3")
    rows = first + read_raw(source, origin, dict(source.upper()))
    got: Counter[Any] = Counter()
    for _, _, _, diff, err, values in rows:
        got[err or tuple(values or ())] += diff
    assert {k: v for k, v in got.items() if v} == {("1", "3", "0.5"): 1}, rows
