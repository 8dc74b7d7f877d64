"""DDL committed between the origin ``C`` and the snapshot ``S`` cannot be rewound: the
state at ``C`` is an error of the tables it touched, at the snapshot's offset."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from tests.integration.test_mysql_upstream_changes import Upstream, read_raw

from timeshard.storage.mysql_source import SNAPSHOT_PARTITION, MySqlSource

pytestmark = [pytest.mark.mysql]


def test_ddl_between_the_origin_and_the_snapshot_errors_the_state_at_the_origin(
    upstream: Upstream,
) -> None:
    for t in ("t", "r", "ok"):
        upstream.sql(f"CREATE TABLE {t} (id int PRIMARY KEY)")
        upstream.sql(f"INSERT INTO {t} VALUES (1), (2)")
    source = MySqlSource("my", upstream.url)
    origin = dict(source.upper())  # the first binding: t, r and ok hold 1 and 2
    upstream.sql("TRUNCATE t")  # committed before the snapshot is taken
    upstream.sql("DROP TABLE r")
    upstream.sql("CREATE TABLE r (id int PRIMARY KEY)")
    upstream.sql("INSERT INTO r VALUES (9)")
    upstream.sql("DELETE FROM ok WHERE id = 2")  # rows: rewound
    rows = read_raw(source, {}, origin)
    at_origin = origin[SNAPSHOT_PARTITION] - 1
    names = [t.name for t in source.tables]
    errs = {
        names[sub]: err
        for sub, part, offset, diff, err, _ in rows
        if err is not None and (part, offset, diff) == (SNAPSHOT_PARTITION, at_origin, 1)
    }
    assert set(errs) == {"r", "t"}, rows
    assert errs["t"].startswith("t: truncated upstream at GTID 0-"), errs
    assert errs["r"].startswith("r: dropped upstream at GTID 0-"), errs
    ok: Counter[Any] = Counter()
    for sub, _, _, diff, _, values in rows:
        if names[sub] == "ok" and values is not None:
            ok[tuple(values)] += diff
    assert {k: v for k, v in ok.items() if v} == {("1",): 1, ("2",): 1}, rows
