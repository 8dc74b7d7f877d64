"""A MYSQL source's options are checked before any connection: InvalidUsage naming the value."""

from __future__ import annotations

from typing import Any

import pytest

from timeshard.errors import InvalidUsage
from timeshard.storage.mysql_source import MySqlSource, Server

URL = "mysql://u:p@127.0.0.1:1/shop"  # nothing listens: a check that connects would fail


@pytest.mark.parametrize("timeout", [0, -5, "10", None, True, 1.5])
def test_a_bad_connect_timeout_is_invalid_usage(timeout: Any) -> None:
    with pytest.raises(InvalidUsage, match=rf"connect_timeout_s .*{timeout!r}"):
        MySqlSource("s", URL, connect_timeout_s=timeout)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("mysql://u:p@127.0.0.1:99999/shop", "99999"),
        ("mysql://u:p@127.0.0.1:abc/shop", "abc"),
        ("mysql://u:p@127.0.0.1:0/shop", ":0/"),
        ("mysql://u:p@127.0.0.1:1/shop?ssl=1", r"\?ssl=1"),
        ("mysql://u:p@127.0.0.1:1/shop#x", "#x"),
    ],
)
def test_a_bad_url_is_invalid_usage_naming_it(url: str, named: str) -> None:
    with pytest.raises(InvalidUsage, match=named) as e:
        Server.from_url(url)
    assert ":p@" not in str(e.value)  # the password stays out of the message


@pytest.mark.parametrize("tables", ["t", ["t", 1], [["t"]], [], ("t", None)])
def test_tables_must_be_a_list_of_names(tables: Any) -> None:
    with pytest.raises(InvalidUsage, match=r"tables must be a non-empty list of table names"):
        MySqlSource("s", URL, tables=tables)
