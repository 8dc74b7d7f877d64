"""The server settings a MYSQL source checks at build, against a fake server."""

from __future__ import annotations

from typing import Any

import pytest

from timeshard.errors import InvalidUsage
from timeshard.storage.mysql_source import REQUIRED_SETTINGS, MySqlSource, Server


class FakeServer:
    """A connection whose cursor answers the settings query and ``SHOW MASTER STATUS``."""

    def __init__(self, do_db: str, ignore_db: str) -> None:
        self.status = ("binlog.000001", 4, do_db, ignore_db)
        self.query = ""

    def cursor(self) -> FakeServer:
        return self

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, query: str, params: Any = None) -> None:
        self.query = query

    def fetchone(self) -> tuple[Any, ...]:
        if self.query == "SHOW MASTER STATUS":
            return self.status
        return tuple(REQUIRED_SETTINGS.values())


def checked(do_db: str, ignore_db: str) -> None:
    source = object.__new__(MySqlSource)
    source.name = "my"
    source.server = Server("h", 3306, "u", "", "shop")
    source._check_settings(FakeServer(do_db, ignore_db))


@pytest.mark.parametrize(
    ("do_db", "ignore_db", "why"),
    [
        ("", "shop", r"database 'shop' out \(Binlog_Ignore_DB is 'shop'\)"),
        ("", "other,shop", r"database 'shop' out \(Binlog_Ignore_DB is 'other,shop'\)"),
        ("other", "", r"only databases 'other' \(Binlog_Do_DB\), not 'shop'"),
    ],
)
def test_a_binlog_filter_that_leaves_the_database_out_is_refused(
    do_db: str, ignore_db: str, why: str
) -> None:
    with pytest.raises(InvalidUsage, match=why):
        checked(do_db, ignore_db)


@pytest.mark.parametrize(("do_db", "ignore_db"), [("", ""), ("shop", ""), ("", "other")])
def test_a_binlog_filter_that_keeps_the_database_is_accepted(do_db: str, ignore_db: str) -> None:
    checked(do_db, ignore_db)
